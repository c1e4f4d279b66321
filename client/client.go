// Package client is the Go SDK of lockgateway: leases (locks with a TTL) and
// fencing tokens over HTTP.
//
// The package has two layers. lockgateway.gen.go is generated from
// openapi.yaml by oapi-codegen (APIClient, ClientWithResponses and the wire
// types) and covers every operation of the API. client.go is the small layer
// most programs need: New, Acquire, Extend, Release, Inspect and Hold, with
// time.Duration instead of milliseconds and typed errors (ErrHeld,
// ErrNotHeld, …) instead of problem documents.
//
// Hold is the safe way to do work under a lock: it holds the lock through the
// gateway's event stream (the gateway renews the lease while the stream is
// open, and closing it releases the lease) and cancels the work's context
// the moment the lease is lost. That still is not
// enough on its own. A lease cannot stop a process that was paused (a GC
// pause, a stopped VM, a slow disk) from carrying on after its lease ran out
// while someone else holds the lock: a paused process does not look at its
// context. So pass Lease.Fence with every write to the resource the lock
// protects, and have the resource refuse writes whose fence is lower than the
// highest it has seen (see "Fencing tokens" in docs/api.md).
//
// A key may contain "/" (jobs/nightly): the generated client sends it
// percent-encoded (/locks/jobs%2Fnightly), which the gateway decodes.
package client

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lockgateway/lockgateway/internal/sleep"
	"github.com/lockgateway/lockgateway/problem"
)

// Errors returned by the Client, matched with errors.Is. An error from the
// gateway is an *Error (errors.As) that matches one of these by its problem
// type.
var (
	// ErrHeld: another token holds the lock (409 lock-held), also after
	// waiting. The *Error's RetryAfter says when the holder's lease ends.
	ErrHeld = errors.New("client: lock held by another token")
	// ErrNotHeld: nobody holds the lock (404 lock-not-found): it was never
	// taken, was released, or expired.
	ErrNotHeld = errors.New("client: lock not held")
	// ErrTokenMismatch: the lock is held by another token (412
	// token-mismatch); nothing changed.
	ErrTokenMismatch = errors.New("client: lock held by another token (token mismatch)")
	// ErrRateLimited: the gateway's rate limit refused the request (429);
	// see RetryAfter.
	ErrRateLimited = errors.New("client: rate limited")
	// ErrQuotaExceeded: the caller's user already holds the most live
	// locks it may (429 quota-exceeded); nothing was taken. RetryAfter says
	// when the user's earliest lock expires; a release frees a place sooner.
	ErrQuotaExceeded = errors.New("client: lock quota exceeded")
	// ErrUnavailable: the gateway could not be reached, or it could not
	// reach its backend (503 backend-unavailable, or a 502/503/504 from a
	// proxy in front of it). The outcome of a write is unknown; retrying it
	// with the same token is safe.
	ErrUnavailable = errors.New("client: gateway unavailable")
	// ErrLockLost: Hold's lease ended before fn returned: the hold's
	// stream said lost (the lease expired, was taken, or the gateway could
	// not renew it in time) or ended otherwise (a DELETE with its token,
	// max hold, the gateway shutting down), or the stream broke or went
	// silent until the lease's end.
	ErrLockLost = errors.New("client: lock lost")
)

// callTimeout bounds one request (plus the wait of a waiting acquire), so
// that a gateway that accepts a connection and never answers cannot hang a
// caller whose context has no deadline.
const callTimeout = 30 * time.Second

// Error is an error response of the gateway: a problem document (RFC 9457),
// or, for a response that is not one (a proxy's 502), just the status.
type Error struct {
	Status    int    // HTTP status
	Type      string // problem type slug, e.g. "lock-held"; "" when the body is not a problem
	Title     string
	Detail    string
	Instance  string
	RequestID string // quote it when reporting a problem
	// Fields names each offending field of a 422 (validation).
	Fields []FieldError
	// RetryAfter is the Retry-After header (409, 429, 503); 0 when absent.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "client: %d", e.Status)
	if e.Type != "" {
		fmt.Fprintf(&b, " %s", e.Type)
	}
	if e.Detail != "" {
		fmt.Fprintf(&b, ": %s", e.Detail)
	}
	for _, f := range e.Fields {
		fmt.Fprintf(&b, "; %s %s", f.Field, f.Message)
	}
	if e.RequestID != "" {
		fmt.Fprintf(&b, " (request id %s)", e.RequestID)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrHeld) and the others true for the matching
// problem types. A 404 that is not lock-not-found (a wrong base URL) is not
// ErrNotHeld.
func (e *Error) Is(target error) bool {
	if e.isSemaphore(target) {
		return true
	}
	switch target {
	case ErrHeld:
		return e.Type == problem.LockHeld.Slug
	case ErrNotHeld:
		return e.Type == problem.LockNotFound.Slug
	case ErrTokenMismatch:
		return e.Type == problem.TokenMismatch.Slug
	case ErrRateLimited:
		return e.Type == problem.RateLimited.Slug || (e.Type == "" && e.Status == http.StatusTooManyRequests)
	case ErrQuotaExceeded:
		return e.Type == problem.QuotaExceeded.Slug
	case ErrUnavailable:
		if e.Type == "" {
			return e.Status == http.StatusBadGateway || e.Status == http.StatusServiceUnavailable ||
				e.Status == http.StatusGatewayTimeout
		}
		return e.Type == problem.Unavailable.Slug
	}
	return false
}

// Lease is a lock this process holds.
type Lease struct {
	Key   string
	Token string // the lease's secret: what extends and releases it
	// Fence strictly increases with every new holder of Key; an extend
	// keeps it. Send it with every write the lock protects.
	Fence     int64
	Owner     string
	TTL       time.Duration // the lease length granted
	ExpiresAt time.Time     // by the gateway's clock; conservative

	// deadline is when the lease ends by this process's monotonic clock:
	// the earlier of (request sent + TTL) and ExpiresAt read on the local
	// clock. Hold never lets work run past it.
	deadline time.Time
}

// LockInfo is what Inspect shows of a held lock; never its token.
type LockInfo struct {
	Key       string
	Owner     string
	Fence     int64
	TTL       time.Duration // time left
	ExpiresAt time.Time
}

// AcquireOptions are Acquire's and Hold's settings; the zero value tries once
// with the gateway's default TTL.
type AcquireOptions struct {
	// TTL is the lease length; 0 takes the gateway's default (30 s unless
	// configured). For Hold and HoldPermit it is the hold's lease, which
	// the gateway renews every TTL/3 while the hold lasts, and 0 takes the
	// gateway's hold TTL (LOCKGW_HOLD_TTL, 5 s unless configured): it
	// bounds how long the key outlives a gateway that died holding it.
	TTL time.Duration
	// Wait is how long to wait for a held lock; 0 tries once. Waits longer
	// than the gateway allows in one request (LOCKGW_MAX_WAIT, 60 s by
	// default) are made of several waiting requests.
	Wait time.Duration
	// Owner is a label shown by Inspect (at most 128 printable characters).
	Owner string
	// Token is the lease's token; empty makes a random one here (128 bits
	// from crypto/rand). Either way every request of one Acquire carries the
	// same token, so retrying after a lost response is safe.
	Token string
	// HoldAtLeast (Hold, HoldPermit) keeps the key at least this long
	// after it was granted, even when fn returns sooner. ShedLock's
	// lockAtLeastFor: a job that finished in a second still keeps a
	// second host whose cron fires a second later from running it again.
	// For a lock the gateway keeps it (hold_at_least_ms, docs/api.md):
	// the release after fn, or the end of the stream if this process dies
	// first, leaves the key held by nobody until then. For a permit Hold
	// extends the lease to what is left of it instead of releasing it,
	// and lets it expire (up to its TTL); a holder that dies leaves it to
	// run out, at most its TTL (see holdLockDelay).
	HoldAtLeast time.Duration
}

// Client talks to one gateway. It is safe for concurrent use.
type Client struct {
	api *ClientWithResponses
	// maxWait is the longest wait_ms one request asks for, in
	// milliseconds; it shrinks when the gateway says it allows less.
	maxWait atomic.Int64
}

// New returns a client for the gateway at baseURL (http://host:port). opts
// are the generated client's options: WithHTTPClient,
// WithRequestEditorFn, and WithAPIKey below.
func New(baseURL string, opts ...ClientOption) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http://host[:port] or https://host[:port]", baseURL)
	}
	api, err := NewClientWithResponses(baseURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	c := &Client{api: api}
	c.maxWait.Store(60_000) // LOCKGW_MAX_WAIT's default
	return c, nil
}

// WithAPIKey sends "Authorization: Bearer <key>" with every request, for a
// gateway running with LOCKGW_API_KEYS_FILE.
func WithAPIKey(key string) ClientOption {
	return WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+key)
		return nil
	})
}

// API is the generated client, for the operations this layer leaves out
// (/readyz, /ratelimit/check, …).
func (c *Client) API() *ClientWithResponses { return c.api }

// Acquire takes key. With opts.Wait > 0 it waits up to that long for the
// lock, and retries, with the same token, requests that failed with
// ErrUnavailable until then. Errors: ErrHeld (with RetryAfter),
// ErrRateLimited, ErrQuotaExceeded (with RetryAfter), ErrUnavailable, or
// an *Error for a bad request.
func (c *Client) Acquire(ctx context.Context, key string, opts AcquireOptions) (*Lease, error) {
	return acquireWaiting(ctx, c, opts, ErrHeld, func(ctx context.Context, token string, wait time.Duration) (*Lease, error) {
		return c.acquire(ctx, key, token, opts, wait)
	})
}

// acquireWaiting is the waiting and retrying of Acquire and AcquirePermit,
// which differ only in the request (try, one attempt with token asking for
// wait) and in busy, the error that says the key is taken (ErrHeld,
// ErrSemaphoreFull).
func acquireWaiting[T any](ctx context.Context, c *Client, opts AcquireOptions, busy error,
	try func(ctx context.Context, token string, wait time.Duration) (T, error),
) (T, error) {
	var none T
	token := opts.Token
	if token == "" {
		token = rand.Text() // 26 base32 characters, 128 bits: a valid token
	}
	if opts.Wait <= 0 {
		return try(ctx, token, 0)
	}
	deadline := time.Now().Add(opts.Wait)
	pause := 50 * time.Millisecond
	for {
		wait := min(time.Until(deadline), time.Duration(c.maxWait.Load())*time.Millisecond)
		start := time.Now()
		got, err := try(ctx, token, max(wait, 0))
		if err == nil || ctx.Err() != nil {
			return got, err
		}
		var e *Error
		switch {
		case errors.As(err, &e) && e.Status == http.StatusUnprocessableEntity && e.names("wait_ms") &&
			wait > 100*time.Millisecond:
			// The gateway allows shorter waits than we asked for
			// (LOCKGW_MAX_WAIT): ask for less from now on.
			c.maxWait.Store((wait / 2).Milliseconds())
			continue
		case errors.Is(err, busy) && time.Since(start) >= min(wait/2, 250*time.Millisecond):
			// The gateway waited (perhaps less than asked: it caps waits at
			// LOCKGW_MAX_WAIT): ask again at once.
		case errors.Is(err, busy), errors.Is(err, ErrUnavailable):
			// Answered at once (a gateway that does not wait, or one that
			// is down): pause so as not to spin.
			if !sleep.For(ctx, min(pause, time.Until(deadline))) {
				return none, err
			}
			pause = min(2*pause, 2*time.Second)
		default:
			return none, err
		}
		if time.Until(deadline) <= 0 {
			return none, err
		}
	}
}

// acquireFields are the body fields both acquire requests (a lock's, a
// permit's) carry: each nil when it takes the gateway's default.
func acquireFields(opts AcquireOptions, wait time.Duration) (ttlMs, waitMs *int64, owner *string) {
	if opts.TTL > 0 {
		ms := opts.TTL.Milliseconds()
		ttlMs = &ms
	}
	if wait > 0 {
		ms := wait.Milliseconds()
		waitMs = &ms
	}
	if opts.Owner != "" {
		owner = &opts.Owner
	}
	return ttlMs, waitMs, owner
}

func (c *Client) acquire(ctx context.Context, key, token string, opts AcquireOptions, wait time.Duration) (*Lease, error) {
	var body AcquireRequest
	body.TtlMs, body.WaitMs, body.Owner = acquireFields(opts, wait)
	rctx, cancel := context.WithTimeout(ctx, wait+callTimeout)
	defer cancel()
	sent := time.Now()
	resp, err := c.api.AcquireLockWithResponse(rctx, key, &AcquireLockParams{LockToken: &token}, body)
	if err != nil {
		return nil, transportError(ctx, "acquire", key, err)
	}
	switch {
	case resp.JSON201 != nil:
		return newLease(*resp.JSON201, sent), nil
	case resp.JSON200 != nil:
		return newLease(*resp.JSON200, sent), nil
	}
	return nil, responseError(resp.HTTPResponse, resp.Body)
}

// Extend resets the lease of key held by token to ttl from now (0: the
// lease's own length, as last granted or extended). Errors: ErrNotHeld (expired or released: acquire
// again, for a new fence), ErrTokenMismatch, ErrUnavailable, or an *Error.
func (c *Client) Extend(ctx context.Context, key, token string, ttl time.Duration) (*Lease, error) {
	body := extendBody(ttl)
	rctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	sent := time.Now()
	resp, err := c.api.ExtendLockWithResponse(rctx, key, &ExtendLockParams{LockToken: &token}, body)
	if err != nil {
		return nil, transportError(ctx, "extend", key, err)
	}
	if resp.JSON200 != nil {
		return newLease(*resp.JSON200, sent), nil
	}
	return nil, responseError(resp.HTTPResponse, resp.Body)
}

// extendBody asks for ttl, or with 0 for no ttl_ms: the gateway then
// keeps the lease's (or permit's) own length, not its default.
func extendBody(ttl time.Duration) ExtendRequest {
	var body ExtendRequest
	if ttl > 0 {
		ms := ttl.Milliseconds()
		body.TtlMs = &ms
	}
	return body
}

// Release frees key held by token. Errors: ErrNotHeld, ErrTokenMismatch (the
// lock stays held), ErrUnavailable, or an *Error.
func (c *Client) Release(ctx context.Context, key, token string) error {
	rctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := c.api.ReleaseLockWithResponse(rctx, key, &ReleaseLockParams{LockToken: &token})
	if err != nil {
		return transportError(ctx, "release", key, err)
	}
	if resp.StatusCode() == http.StatusNoContent {
		return nil
	}
	return responseError(resp.HTTPResponse, resp.Body)
}

// Inspect says who holds key. ErrNotHeld when nobody does.
func (c *Client) Inspect(ctx context.Context, key string) (*LockInfo, error) {
	rctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := c.api.InspectLockWithResponse(rctx, key, nil)
	if err != nil {
		return nil, transportError(ctx, "inspect", key, err)
	}
	if b := resp.JSON200; b != nil {
		return &LockInfo{
			Key:       b.Key,
			Owner:     deref(b.Owner),
			Fence:     b.Fence,
			TTL:       time.Duration(b.TtlMs) * time.Millisecond,
			ExpiresAt: b.ExpiresAt,
		}, nil
	}
	return nil, responseError(resp.HTTPResponse, resp.Body)
}

func newLease(b APILease, sent time.Time) *Lease {
	ttl := time.Duration(b.TtlMs) * time.Millisecond
	// The store started the lease after we sent the request, so sent+TTL
	// is never later than its real end (Redlock's ExpiresAt is earlier
	// still: it takes off the quorum round and clock drift). ExpiresAt read
	// on our clock is used when it is earlier and plausible: a clock far
	// ahead of the gateway's would otherwise end every lease at once.
	deadline := sent.Add(ttl)
	now := time.Now()
	if byClock := now.Add(b.ExpiresAt.Sub(now)); byClock.Before(deadline) && byClock.After(sent) {
		deadline = byClock
	}
	return &Lease{
		Key:       b.Key,
		Token:     b.Token,
		Fence:     b.Fence,
		Owner:     deref(b.Owner),
		TTL:       ttl,
		ExpiresAt: b.ExpiresAt,
		deadline:  deadline,
	}
}

// transportError is an error of the request itself: the caller's context
// ended (returned as is, for errors.Is(err, context.Canceled)), or the
// gateway could not be reached or did not answer (ErrUnavailable).
func transportError(ctx context.Context, op, key string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("client: %s %s: %w", op, key, context.Cause(ctx))
	}
	return fmt.Errorf("client: %s %s: %w: %w", op, key, ErrUnavailable, err)
}

// responseError turns a response that is not the operation's success into
// an *Error.
func responseError(resp *http.Response, body []byte) error {
	e := &Error{Status: resp.StatusCode}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/problem+json" {
		var p Problem
		if json.Unmarshal(body, &p) == nil {
			e.Type = strings.TrimPrefix(p.Type, problem.Base)
			e.Title, e.Detail, e.Instance, e.RequestID = p.Title, p.Detail, p.Instance, p.RequestId
			if p.Errors != nil {
				e.Fields = *p.Errors
			}
		}
	}
	if e.RequestID == "" {
		e.RequestID = resp.Header.Get("X-Request-Id")
	}
	if e.Detail == "" {
		e.Detail = http.StatusText(resp.StatusCode)
	}
	return e
}

func (e *Error) names(field string) bool {
	for _, f := range e.Fields {
		if f.Field == field {
			return true
		}
	}
	return false
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
