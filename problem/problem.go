// Package problem is the catalogue of the gateway's problem types (RFC 9457
// problem details): the one place each type's slug, status and title is
// written. The handlers answer with them, the rate limiter and the Go
// client recognise them, and openapi.yaml lists the same table (a test in
// this package checks that it does). The slugs are part of the API:
// clients branch on them.
package problem

import "net/http"

// Base prefixes every problem type URI.
const Base = "https://lockgateway.dev/problems/"

// Kind is one kind of problem: a stable type URI, its status and title.
type Kind struct {
	Slug   string
	Status int
	Title  string
}

// Type is the kind's stable type URI.
func (k Kind) Type() string { return Base + k.Slug }

// The kinds.
var (
	Malformed        = Kind{"malformed-request", http.StatusBadRequest, "Malformed request"}
	Unauthorized     = Kind{"unauthorized", http.StatusUnauthorized, "Unauthorized"}
	Forbidden        = Kind{"forbidden", http.StatusForbidden, "Forbidden"}
	NotFound         = Kind{"not-found", http.StatusNotFound, "Not found"}
	LockNotFound     = Kind{"lock-not-found", http.StatusNotFound, "Lock not found"}
	MethodNotAllowed = Kind{"method-not-allowed", http.StatusMethodNotAllowed, "Method not allowed"}
	LockHeld         = Kind{"lock-held", http.StatusConflict, "Lock held"}
	SemaphoreFull    = Kind{"semaphore-full", http.StatusConflict, "Semaphore full"}
	LimitMismatch    = Kind{"limit-mismatch", http.StatusConflict, "Semaphore limit mismatch"}
	TokenMismatch    = Kind{"token-mismatch", http.StatusPreconditionFailed, "Lock token mismatch"}
	BodyTooLarge     = Kind{"body-too-large", http.StatusRequestEntityTooLarge, "Request body too large"}
	HeadersTooLarge  = Kind{"headers-too-large", http.StatusRequestHeaderFieldsTooLarge, "Request headers too large"}
	UnsupportedMedia = Kind{"unsupported-media-type", http.StatusUnsupportedMediaType, "Unsupported media type"}
	Validation       = Kind{"validation", http.StatusUnprocessableEntity, "Validation failed"}
	TokenRequired    = Kind{"token-required", http.StatusPreconditionRequired, "Lock token required"}
	RateLimited      = Kind{"rate-limited", http.StatusTooManyRequests, "Rate limited"}
	QuotaExceeded    = Kind{"quota-exceeded", http.StatusTooManyRequests, "Lock quota exceeded"}
	Internal         = Kind{"internal", http.StatusInternalServerError, "Internal error"}
	Unavailable      = Kind{"backend-unavailable", http.StatusServiceUnavailable, "Backend unavailable"}
	Refused          = Kind{"backend-refuses-writes", http.StatusServiceUnavailable, "Backend refuses writes"}
	TooManyLocks     = Kind{"too-many-locks", http.StatusServiceUnavailable, "Too many locks"}
	TooManyWaiters   = Kind{"too-many-waiters", http.StatusServiceUnavailable, "Too many waiting acquires"}
)

// All lists every kind.
var All = []Kind{
	Malformed, Unauthorized, Forbidden, NotFound, LockNotFound, MethodNotAllowed,
	LockHeld, SemaphoreFull, LimitMismatch, TokenMismatch, BodyTooLarge, HeadersTooLarge, UnsupportedMedia, Validation, TokenRequired,
	RateLimited, QuotaExceeded, Internal, Unavailable, Refused, TooManyLocks, TooManyWaiters,
}
