package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/lockgateway/lockgateway/internal/sleep"
	"github.com/lockgateway/lockgateway/problem"
)

// Errors of the semaphore calls, besides the lock calls' ErrNotHeld,
// ErrTokenMismatch, ErrRateLimited and ErrUnavailable (which mean the
// same for a permit).
var (
	// ErrSemaphoreFull: all permits are held (409 semaphore-full), also
	// after waiting. The *Error's RetryAfter says when the first may expire.
	ErrSemaphoreFull = errors.New("client: all permits of the semaphore are held")
	// ErrLimitMismatch: the current holders were granted under another
	// limit (409 limit-mismatch); nothing was taken.
	ErrLimitMismatch = errors.New("client: the semaphore's holders use another limit")
)

// isSemaphore matches an *Error against the semaphore errors (Error.Is
// asks it first).
func (e *Error) isSemaphore(target error) bool {
	switch target {
	case ErrSemaphoreFull:
		return e.Type == problem.SemaphoreFull.Slug
	case ErrLimitMismatch:
		return e.Type == problem.LimitMismatch.Slug
	}
	return false
}

// Permit is a permit of a counting semaphore this process holds.
type Permit struct {
	Key   string
	Token string // the permit's secret: what extends and releases it
	Limit int
	// Fence strictly increases with every permit granted on Key.
	Fence     int64
	Owner     string
	TTL       time.Duration
	ExpiresAt time.Time

	deadline time.Time // as Lease.deadline
}

// SemaphoreInfo is what InspectSemaphore shows: never a token.
type SemaphoreInfo struct {
	Key     string
	Limit   int
	Holders []PermitInfo // by fence
}

// PermitInfo is one held permit, as InspectSemaphore shows it.
type PermitInfo struct {
	Owner     string
	Fence     int64
	TTL       time.Duration // time left
	ExpiresAt time.Time
}

// AcquirePermit takes one of limit permits of key, with Acquire's options
// and retry rules: with opts.Wait > 0 it waits up to that long, retrying
// with the same token. Errors: ErrSemaphoreFull (with RetryAfter),
// ErrLimitMismatch, ErrRateLimited, ErrUnavailable, or an *Error.
func (c *Client) AcquirePermit(ctx context.Context, key string, limit int, opts AcquireOptions) (*Permit, error) {
	token := opts.Token
	if token == "" {
		token = rand.Text()
	}
	if opts.Wait <= 0 {
		return c.acquirePermit(ctx, key, limit, token, opts, 0)
	}
	deadline := time.Now().Add(opts.Wait)
	pause := 50 * time.Millisecond
	for {
		wait := min(time.Until(deadline), time.Duration(c.maxWait.Load())*time.Millisecond)
		start := time.Now()
		p, err := c.acquirePermit(ctx, key, limit, token, opts, max(wait, 0))
		if err == nil || ctx.Err() != nil {
			return p, err
		}
		var e *Error
		switch {
		case errors.As(err, &e) && e.Status == http.StatusUnprocessableEntity && e.names("wait_ms") &&
			wait > 100*time.Millisecond:
			c.maxWait.Store((wait / 2).Milliseconds()) // as Acquire
			continue
		case errors.Is(err, ErrSemaphoreFull) && time.Since(start) >= min(wait/2, 250*time.Millisecond):
		case errors.Is(err, ErrSemaphoreFull), errors.Is(err, ErrUnavailable):
			if !sleep.For(ctx, min(pause, time.Until(deadline))) {
				return nil, err
			}
			pause = min(2*pause, 2*time.Second)
		default:
			return nil, err
		}
		if time.Until(deadline) <= 0 {
			return nil, err
		}
	}
}

func (c *Client) acquirePermit(ctx context.Context, key string, limit int, token string, opts AcquireOptions, wait time.Duration) (*Permit, error) {
	body := PermitRequest{Limit: int64(limit)}
	if opts.TTL > 0 {
		ms := opts.TTL.Milliseconds()
		body.TtlMs = &ms
	}
	if wait > 0 {
		ms := wait.Milliseconds()
		body.WaitMs = &ms
	}
	if opts.Owner != "" {
		body.Owner = &opts.Owner
	}
	rctx, cancel := context.WithTimeout(ctx, wait+callTimeout)
	defer cancel()
	sent := time.Now()
	resp, err := c.api.AcquirePermitWithResponse(rctx, key, &AcquirePermitParams{LockToken: &token}, body)
	if err != nil {
		return nil, transportError(ctx, "acquire permit", key, err)
	}
	switch {
	case resp.JSON201 != nil:
		return newPermit(*resp.JSON201, sent), nil
	case resp.JSON200 != nil:
		return newPermit(*resp.JSON200, sent), nil
	}
	return nil, responseError(resp.HTTPResponse, resp.Body)
}

// ExtendPermit resets token's permit of key to ttl from now (0: its own
// length). Errors: ErrNotHeld, ErrTokenMismatch, ErrUnavailable, or an
// *Error.
func (c *Client) ExtendPermit(ctx context.Context, key, token string, ttl time.Duration) (*Permit, error) {
	var body ExtendRequest
	if ttl > 0 {
		ms := ttl.Milliseconds()
		body.TtlMs = &ms
	}
	rctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	sent := time.Now()
	resp, err := c.api.ExtendPermitWithResponse(rctx, key, &ExtendPermitParams{LockToken: &token}, body)
	if err != nil {
		return nil, transportError(ctx, "extend permit", key, err)
	}
	if resp.JSON200 != nil {
		return newPermit(*resp.JSON200, sent), nil
	}
	return nil, responseError(resp.HTTPResponse, resp.Body)
}

// ReleasePermit gives token's permit of key back. Errors: ErrNotHeld,
// ErrTokenMismatch, ErrUnavailable, or an *Error.
func (c *Client) ReleasePermit(ctx context.Context, key, token string) error {
	rctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := c.api.ReleasePermitWithResponse(rctx, key, &ReleasePermitParams{LockToken: &token})
	if err != nil {
		return transportError(ctx, "release permit", key, err)
	}
	if resp.StatusCode() == http.StatusNoContent {
		return nil
	}
	return responseError(resp.HTTPResponse, resp.Body)
}

// InspectSemaphore shows key's limit and holders. ErrNotHeld when no permit
// is held.
func (c *Client) InspectSemaphore(ctx context.Context, key string) (*SemaphoreInfo, error) {
	rctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := c.api.InspectSemaphoreWithResponse(rctx, key, nil)
	if err != nil {
		return nil, transportError(ctx, "inspect semaphore", key, err)
	}
	b := resp.JSON200
	if b == nil {
		return nil, responseError(resp.HTTPResponse, resp.Body)
	}
	info := &SemaphoreInfo{Key: b.Key, Limit: int(b.Limit)}
	for _, h := range b.Holders {
		info.Holders = append(info.Holders, PermitInfo{Owner: deref(h.Owner), Fence: h.Fence,
			TTL: time.Duration(h.TtlMs) * time.Millisecond, ExpiresAt: h.ExpiresAt})
	}
	return info, nil
}

// HoldPermit is Hold for a permit: it takes one of limit permits of key,
// runs fn, extends the permit every TTL/3 while fn runs, cancels fn's
// context the moment the permit is lost (the error then matches
// ErrLockLost), and releases the permit when fn returns.
func (c *Client) HoldPermit(ctx context.Context, key string, limit int, opts AcquireOptions, fn func(ctx context.Context, p *Permit) error) error {
	p, err := c.AcquirePermit(ctx, key, limit, opts)
	if err != nil {
		return err
	}
	if opts.Wait > 0 { // restart the permit from a moment we know (see Hold)
		again := opts
		again.Token, again.Wait = p.Token, 0
		if renewed, err := c.AcquirePermit(ctx, key, limit, again); err == nil {
			p = renewed
		}
	}
	fnCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var lost error
	kept := &Lease{Key: p.Key, Token: p.Token, Fence: p.Fence, TTL: p.TTL, ExpiresAt: p.ExpiresAt, deadline: p.deadline}
	extend := func(ctx context.Context, key, token string, ttl time.Duration) (*Lease, error) {
		q, err := c.ExtendPermit(ctx, key, token, ttl)
		if err != nil {
			return nil, err
		}
		return &Lease{Key: q.Key, Token: q.Token, Fence: q.Fence, TTL: q.TTL, ExpiresAt: q.ExpiresAt, deadline: q.deadline}, nil
	}
	wg.Go(func() { lost = c.keepWith(fnCtx, kept, stop, cancel, extend) })
	fnErr := fn(fnCtx, p)
	close(stop)
	wg.Wait()
	if lost != nil {
		if fnErr != nil && !errors.Is(fnErr, context.Canceled) {
			return errors.Join(lost, fnErr)
		}
		return lost
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer rcancel()
	if err := c.ReleasePermit(rctx, p.Key, p.Token); err != nil {
		if errors.Is(err, ErrNotHeld) || errors.Is(err, ErrTokenMismatch) {
			err = fmt.Errorf("%w: the permit was no longer held when fn returned: %w", ErrLockLost, err)
		} else {
			err = fmt.Errorf("client: release permit %s after fn: %w", p.Key, err)
		}
		return errors.Join(fnErr, err)
	}
	return fnErr
}

func newPermit(b APIPermit, sent time.Time) *Permit {
	l := newLease(APILease{Key: b.Key, Token: b.Token, Fence: b.Fence, Owner: b.Owner, TtlMs: b.TtlMs, ExpiresAt: b.ExpiresAt}, sent)
	return &Permit{Key: l.Key, Token: l.Token, Limit: int(b.Limit), Fence: l.Fence, Owner: l.Owner,
		TTL: l.TTL, ExpiresAt: l.ExpiresAt, deadline: l.deadline}
}
