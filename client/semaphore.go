package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

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
	return acquireWaiting(ctx, c, opts, ErrSemaphoreFull, func(ctx context.Context, token string, wait time.Duration) (*Permit, error) {
		return c.acquirePermit(ctx, key, limit, token, opts, wait)
	})
}

func (c *Client) acquirePermit(ctx context.Context, key string, limit int, token string, opts AcquireOptions, wait time.Duration) (*Permit, error) {
	body := PermitRequest{Limit: int64(limit)}
	body.TtlMs, body.WaitMs, body.Owner = acquireFields(opts, wait)
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
	body := extendBody(ttl)
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

// HoldPermit is Hold for a permit: it takes one of limit permits of key
// through a hold's stream, runs fn while the gateway renews the permit,
// cancels fn's context the moment the permit is lost (the error then
// matches ErrLockLost), and releases the permit when fn returns.
func (c *Client) HoldPermit(ctx context.Context, key string, limit int, opts AcquireOptions, fn func(ctx context.Context, p *Permit) error) error {
	return hold(ctx, c, opts, holdKind[*Permit]{
		key:       key,
		noun:      "permit",
		releaseOp: "release permit",
		busy:      ErrSemaphoreFull,
		open: func(ctx context.Context, token string, wait, lockDelay time.Duration) (*http.Response, error) {
			body := PermitRequest{Limit: int64(limit)}
			body.TtlMs, body.WaitMs, body.Owner = acquireFields(opts, wait)
			body.LockDelayMs = optionalMillis(lockDelay)
			return c.api.ClientInterface.AcquirePermit(ctx, key, &AcquirePermitParams{LockToken: &token}, body, acceptEventStream)
		},
		grant: func(data []byte, sent time.Time) (*Permit, error) {
			var b APIPermit
			if err := json.Unmarshal(data, &b); err != nil || b.Token == "" {
				return nil, fmt.Errorf("acquired event without a permit: %q", data)
			}
			return newPermit(b, sent), nil
		},
		lease: (*Permit).lease,
		// hold extends a Lease: the permit's extend, seen as one.
		extend: func(ctx context.Context, key, token string, ttl time.Duration) (*Lease, error) {
			p, err := c.ExtendPermit(ctx, key, token, ttl)
			if err != nil {
				return nil, err
			}
			return p.lease(), nil
		},
		release: c.ReleasePermit,
	}, fn)
}

// lease is p as a Lease, for what keeps and releases either.
func (p *Permit) lease() *Lease {
	return &Lease{Key: p.Key, Token: p.Token, Fence: p.Fence, Owner: p.Owner, TTL: p.TTL, ExpiresAt: p.ExpiresAt, deadline: p.deadline}
}

func newPermit(b APIPermit, sent time.Time) *Permit {
	l := newLease(APILease{Key: b.Key, Token: b.Token, Fence: b.Fence, Owner: b.Owner, TtlMs: b.TtlMs, ExpiresAt: b.ExpiresAt}, sent)
	return &Permit{Key: l.Key, Token: l.Token, Limit: int(b.Limit), Fence: l.Fence, Owner: l.Owner,
		TTL: l.TTL, ExpiresAt: l.ExpiresAt, deadline: l.deadline}
}
