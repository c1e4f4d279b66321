package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockgateway/lockgateway/internal/retryafter"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/middleware"
	"github.com/lockgateway/lockgateway/problem"
)

// Problem is an RFC 9457 problem details body.
type Problem struct {
	Type      string       `json:"type"`
	Title     string       `json:"title"`
	Status    int          `json:"status"`
	Detail    string       `json:"detail"`
	Instance  string       `json:"instance"`
	RequestID string       `json:"request_id,omitempty"`
	Errors    []FieldError `json:"errors,omitempty"`
	Nodes     []nodeJSON   `json:"nodes,omitempty"` // /readyz of a Redlock
	Token     string       `json:"token,omitempty"` // see withToken
}

// FieldError names one field that failed validation and why.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Error is a problem a handler or middleware decided on: it carries its kind
// and a detail written for the client.
type Error struct {
	Kind       problem.Kind
	Detail     string
	Fields     []FieldError
	RetryAfter time.Duration // sent as Retry-After when positive
	Nodes      []nodeJSON
	Token      string
}

func (e *Error) Error() string { return e.Kind.Slug + ": " + e.Detail }

func newError(k problem.Kind, detail string) *Error { return &Error{Kind: k, Detail: detail} }

// errShuttingDown ends a waiting acquire when the server stops.
var errShuttingDown = &Error{Kind: problem.Unavailable, Detail: "the server is shutting down; retry, another instance will answer", RetryAfter: time.Second}

// domainErrors is the one table from the store's errors to problems.
// Anything not here (and not an *Error) is unexpected: logged once, and
// answered as a 500 that says nothing of its cause.
var domainErrors = []struct {
	err    error
	kind   problem.Kind
	detail string
	// read, when set, is the detail for a GET or HEAD, which changes
	// nothing and has no Lock-Token to retry with.
	read string
}{
	{lockstore.ErrHeld, problem.LockHeld, "the lock is held by another token", ""},
	// Retry-After is when the first permit may free itself.
	{lockstore.ErrSemaphoreFull, problem.SemaphoreFull, "all permits of the semaphore are held; nothing was taken; retry after Retry-After seconds, or wait with wait_ms", ""},
	{lockstore.ErrLimitMismatch, problem.LimitMismatch, "the semaphore's current permits were granted under another limit; nothing was taken; use the same limit as the other holders, or retry once their permits are gone", ""},
	{lockstore.ErrNotHeld, problem.LockNotFound, "the lock is not held: it was never taken, was released, or expired", ""},
	{lockstore.ErrTokenMismatch, problem.TokenMismatch, "the lock is held by another token", ""},
	// Retry-After is when the earliest of the counted locks expires.
	{lockstore.ErrUserQuota, problem.QuotaExceeded, "you already hold as many live locks as one user may (LOCKGW_MAX_LOCKS_PER_USER); nothing was taken; release one of yours, or retry after Retry-After seconds, when your earliest lock expires", ""},
	{lockstore.ErrStoreFull, problem.TooManyLocks, "the gateway holds as many live locks as it may (LOCKGW_MAX_LOCKS); nothing was taken; retry after Retry-After seconds, when the earliest lock expires", ""},
	// Before ErrUnavailable, which it also is; refusalDetails says why.
	{lockstore.ErrRefused, problem.Refused, "the lock backend refuses writes; nothing was written", ""},
	// Before ErrUnavailable, which it also is: the backend did answer.
	{lockstore.ErrReplicas, problem.Unavailable, "fewer Redis replicas acknowledged the write than the gateway waits for (LOCKGW_REDIS_WAIT_REPLICAS), so a failover could lose it; a new lock was taken back, a renewal or extend may have happened; retry with the same Lock-Token", ""},
	{lockstore.ErrUnavailable, problem.Unavailable, "the lock backend did not answer in time; the outcome is unknown, retry with the same Lock-Token", readUnavailable},
	// A client that went away, or a deadline we set, ends the request
	// before the backend answered.
	{context.Canceled, problem.Unavailable, "the request was cancelled before the backend answered; retry with the same Lock-Token", "the request was cancelled before the backend answered; a read changes nothing, retry it"},
	{context.DeadlineExceeded, problem.Unavailable, "the lock backend did not answer in time; the outcome is unknown, retry with the same Lock-Token", readUnavailable},
}

const readUnavailable = "the lock backend did not answer in time; a read changes nothing, retry it after Retry-After seconds"

// refusalDetails says why the backend refuses writes, by
// lockstore.RefusedError.Reason: what the operator has to fix. Nothing was
// written, so a retry with the same token is as safe as ever.
var refusalDetails = map[string]string{
	"oom":        "the lock backend is out of memory (Redis maxmemory with noeviction) and refuses new locks until memory is freed or maxmemory raised; releases and extends still work",
	"readonly":   "the lock backend is a read-only replica; point the gateway at the primary, or wait for the failover to finish",
	"misconf":    "the lock backend stopped writes because it cannot save its snapshot (Redis MISCONF); fix its disk or persistence settings",
	"noreplicas": "the lock backend has fewer replicas than its min-replicas-to-write and refuses writes",
	"busy":       "the lock backend is busy running a long script; it answers again once the script ends or is killed",
}

// withToken is the 503 of an acquire whose outcome is unknown, for a
// client that sent no Lock-Token: it carries the token the gateway made, so
// the client can retry with it (200 if the lock was granted after all) or
// release it, and no lease is left that nobody can act on.
func withToken(err error, token string) *Error {
	e := fromDomain(err)
	e.Token = token
	e.Detail += "; the token this attempt used is in token"
	return e
}

// quorumError is a multi-node store's "no majority possible", with a detail
// that names node counts only (lockstore.QuorumError).
type quorumError interface {
	error
	QuorumDetail() string
}

// WriteError answers err as a problem. It is the only place errors become
// HTTP responses.
func WriteError(w http.ResponseWriter, r *http.Request, log zerolog.Logger, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = fromDomainFor(err, r.Method == http.MethodGet || r.Method == http.MethodHead)
		if e == nil {
			log.Error().Err(err).
				Str("request_id", middleware.GetRequestID(r.Context())).
				Str("method", r.Method).
				Msg("unexpected error")
			e = newError(problem.Internal, "the server could not handle the request; quote the request_id when reporting it")
		}
	}
	WriteProblem(w, r, e)
}

func fromDomain(err error) *Error { return fromDomainFor(err, false) }

// fromDomainFor is fromDomain for a request that only reads (GET, HEAD)
// when read is true: its details never tell it to retry with a token.
func fromDomainFor(err error, read bool) *Error {
	for _, d := range domainErrors {
		if !errors.Is(err, d.err) {
			continue
		}
		e := newError(d.kind, d.detail)
		if read && d.read != "" {
			e.Detail = d.read
		}
		if c, ok := errors.AsType[*lockstore.CapError](err); ok {
			// Rounded up, at least 1 s (WriteProblem). A release may free
			// a place sooner, but only its owner knows when.
			e.RetryAfter = max(c.Next, time.Second)
			return e
		}
		switch d.kind.Status {
		case http.StatusConflict:
			var held *lockstore.HeldError
			if errors.As(err, &held) {
				e.RetryAfter = held.Remaining
			}
			if full, ok := errors.AsType[*lockstore.FullError](err); ok {
				e.RetryAfter = full.Remaining
			}
			if m, ok := errors.AsType[*lockstore.LimitMismatchError](err); ok {
				e.RetryAfter = m.Remaining
				if m.Limit > 0 {
					e.Detail = fmt.Sprintf("the semaphore's current permits were granted under limit %d; nothing was taken; use limit %d as the other holders do, or retry once their permits are gone", m.Limit, m.Limit)
				}
			}
		case http.StatusServiceUnavailable:
			// Redlock says why a majority was impossible; that text names
			// node counts only, never addresses or internals.
			if q, ok := errors.AsType[quorumError](err); ok {
				e.Detail = q.QuorumDetail()
			}
			if r, ok := errors.AsType[*lockstore.RefusedError](err); ok && refusalDetails[r.Reason] != "" {
				e.Detail = refusalDetails[r.Reason]
			}
			e.RetryAfter = time.Second
		}
		return e
	}
	return nil
}

// WriteProblem writes e as application/problem+json.
func WriteProblem(w http.ResponseWriter, r *http.Request, e *Error) {
	h := w.Header()
	switch {
	case e.RetryAfter > 0:
		h.Set("Retry-After", strconv.Itoa(retryafter.Seconds(e.RetryAfter)))
	case h.Get("Retry-After") != "": // set by a middleware (the rate limiter)
	case e.Kind.Status == http.StatusConflict, e.Kind.Status == http.StatusServiceUnavailable, e.Kind.Status == http.StatusTooManyRequests:
		h.Set("Retry-After", "1")
	}
	// A lease's ETag (its token) never goes with a problem; a state's,
	// weak (GET's 404 of a free lock, watch.go), does.
	if !strings.HasPrefix(h.Get("ETag"), "W/") {
		h.Del("ETag")
	}
	h.Del("Location")
	middleware.SpanProblem(r.Context(), e.Kind.Type())
	encode(w, e.Kind.Status, "application/problem+json", Problem{
		Type:      e.Kind.Type(),
		Title:     e.Kind.Title,
		Status:    e.Kind.Status,
		Detail:    e.Detail,
		Instance:  instance(r),
		RequestID: middleware.GetRequestID(r.Context()),
		Errors:    e.Fields,
		Nodes:     e.Nodes,
		Token:     e.Token,
	})
}

// maxInstance bounds how much of the request path a problem repeats in
// instance: the path of every valid key fits (MaxKeyBytes after the longest
// prefix, /semaphores/), and a 20 000-byte path gets a short answer, not
// its own echo.
const maxInstance = len(SemaphoresPrefix) + MaxKeyBytes + 32

// instance is a problem's instance: the request path, cut to maxInstance
// bytes and marked with "…" when longer.
func instance(r *http.Request) string {
	p := r.URL.EscapedPath()
	if len(p) <= maxInstance {
		return p
	}
	return clip(p, maxInstance) + "…"
}

// ProblemJSON is the body of a problem of kind k, for a response written
// outside any handler (see server/rawerrors.go): its instance is empty, as
// the request could not be parsed.
func ProblemJSON(k problem.Kind, detail, requestID string) []byte {
	b, err := json.Marshal(Problem{Type: k.Type(), Title: k.Title, Status: k.Status, Detail: detail, RequestID: requestID})
	if err != nil {
		panic(fmt.Sprintf("handlers: marshal problem: %v", err))
	}
	return b
}

// Refuse answers every request with one problem: for middleware that
// refuses requests (401, 403, 429) in the gateway's own format.
func Refuse(k problem.Kind, detail string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteProblem(w, r, newError(k, detail))
	})
}
