package handlers

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/problem"
)

// SemaphoresPrefix is where semaphore keys start in a URL path. Keys follow
// the lock key rules (CheckKey), and API keys' prefixes allow them alike.
const SemaphoresPrefix = "/semaphores/"

// Semaphores serves /semaphores/{key}: counting semaphores, with the
// decoding, validation, waiting and token rules of the lock endpoints.
type Semaphores struct {
	*Locks
	sems    lockstore.Semaphores
	semHub  *SemHub  // watchers' (watch_sem.go)
	permits *renewer // holds' renewals (hold_renewer.go)
}

// NewSemaphores returns the semaphore endpoints over sems, sharing locks'
// limits, logger and shutdown signal.
func NewSemaphores(sems lockstore.Semaphores, locks *Locks) *Semaphores {
	return &Semaphores{Locks: locks, sems: sems, semHub: lockstore.NewSemHub(sems, locks.limits.BackendTimeout),
		permits: newPermitRenewer(sems, locks.backendTimeout(), locks.obs)}
}

// permitBody is the body of a grant or an extension.
type permitBody struct {
	Key       string `json:"key"`
	Token     string `json:"token"`
	Limit     int    `json:"limit"`
	Fence     int64  `json:"fence"`
	Owner     string `json:"owner,omitempty"`
	TTLms     int64  `json:"ttl_ms"`
	ExpiresAt string `json:"expires_at"`
}

func newPermitBody(p lockstore.Permit) permitBody {
	return permitBody{Key: p.Key, Token: p.Token, Limit: p.Limit, Fence: p.Fence, Owner: p.Owner,
		TTLms: p.Granted.Milliseconds(), ExpiresAt: timestamp(p.ExpiresAt)}
}

// semErrors are the semaphore wording of the errors whose lock wording
// (domainErrors) would speak of "the lock".
func semError(err error) error {
	switch {
	case errors.Is(err, lockstore.ErrNotHeld):
		return newError(problem.LockNotFound, "no permit of the semaphore is held: never taken, released, or expired")
	case errors.Is(err, lockstore.ErrTokenMismatch):
		return newError(problem.TokenMismatch, "the token holds no permit of the semaphore; the permits stay as they are")
	}
	return err
}

// Acquire serves PUT /semaphores/{key}: take a permit, waiting up to
// wait_ms (or Prefer: wait) in line with the other waiters.
func (h *Semaphores) Acquire() http.Handler { return serveAcquire(h.acquirePermit) }

type acquirePermitRequest struct {
	Limit  *int64  `json:"limit" validate:"required,gte=1,lte=10000"`
	TTLms  *int64  `json:"ttl_ms" validate:"omitnil,gte=10,maxttl"`
	WaitMs *int64  `json:"wait_ms" validate:"omitnil,gte=0,maxwait"`
	Owner  *string `json:"owner" validate:"omitnil,max=128,printable"`
	// A hold's own (Accept: text/event-stream; hold.go), as for locks.
	MaxHoldMs   *int64 `json:"max_hold_ms" validate:"omitnil,gte=1"`
	LockDelayMs *int64 `json:"lock_delay_ms" validate:"omitnil,gte=0,maxttl"`
}

// acquirePermit answers an acquire, or starts its hold and returns it for
// the handler to run.
func (h *Semaphores) acquirePermit(w http.ResponseWriter, r *http.Request) *holdStream {
	var req acquirePermitRequest
	key, token, err := h.parse(w, r, false, &req)
	if err != nil {
		WriteError(w, r, h.log, err)
		return nil
	}
	holding := wantsStream(r)
	if err := holdFields(holding, req.MaxHoldMs, req.LockDelayMs); err != nil {
		WriteError(w, r, h.log, err)
		return nil
	}
	ours := token == ""
	if ours {
		token = lockstore.NewToken()
	}
	pr := lockstore.PermitRequest{Token: token, TTL: h.ttl(holding, req.TTLms), Limit: int(*req.Limit)}
	if req.Owner != nil {
		pr.Owner = *req.Owner
	}
	if pr.Wait, err = h.wait(w, r, req.WaitMs); err != nil {
		WriteError(w, r, h.log, err)
		return nil
	}
	start := time.Now()
	p, err := h.acquire(r.Context(), key, pr)
	if ours {
		p.Renewed = false // a token of ours is new, as a lock's (Locks.acquireLock)
	}
	h.obs.PermitAcquired(permitOutcome(p, err), time.Since(start))
	release := func(ctx context.Context) error { return h.release(ctx, key, token) }
	if h.answered(w, r, err, ours, p.Renewed, token, "permit", release) {
		return nil
	}
	status := grantHeaders(w, SemaphoresPrefix, key, token, p.Renewed)
	if holding {
		return h.holdPermit(w, r, status, p, holdOptions{maxHold: millis(req.MaxHoldMs), lockDelay: millis(req.LockDelayMs)})
	}
	encode(w, status, "application/json", newPermitBody(p))
	return nil
}

// acquire is Locks.acquire for a permit.
func (h *Semaphores) acquire(ctx context.Context, key string, req lockstore.PermitRequest) (lockstore.Permit, error) {
	return acquireWaiting(ctx, h.Locks, "permit wait", req.Wait, func(ctx context.Context) (lockstore.Permit, error) {
		return h.sems.SemAcquire(ctx, key, req)
	})
}

// extend and release are the store's, observed (Observer.PermitOp).
func (h *Semaphores) extend(ctx context.Context, key, token string, ttl time.Duration) (lockstore.Permit, error) {
	p, err := h.sems.SemExtend(ctx, key, token, ttl)
	h.obs.PermitOp("extend", permitOpOutcome(err))
	return p, err
}

func (h *Semaphores) release(ctx context.Context, key, token string) error {
	err := h.sems.SemRelease(ctx, key, token)
	h.obs.PermitOp("release", permitOpOutcome(err))
	return err
}

// permitOutcome is how a permit acquire ended, for Observer.PermitAcquired:
// acquired, renewed, full, limit_mismatch, abandoned (the client left),
// unavailable (the store did not answer or refused to write) or error.
func permitOutcome(p lockstore.Permit, err error) string {
	switch {
	case err == nil && p.Renewed:
		return "renewed"
	case err == nil:
		return "acquired"
	case errors.Is(err, lockstore.ErrSemaphoreFull):
		return "full"
	case errors.Is(err, lockstore.ErrLimitMismatch):
		return "limit_mismatch"
	case errors.Is(err, context.Canceled):
		return "abandoned"
	}
	return permitFailure(err)
}

// permitOpOutcome is how a permit extend or release ended, for
// Observer.PermitOp: done, gone (no permit held: expired or never taken),
// mismatch (others hold, not the token), unavailable or error.
func permitOpOutcome(err error) string {
	switch {
	case err == nil:
		return "done"
	case errors.Is(err, lockstore.ErrNotHeld):
		return "gone"
	case errors.Is(err, lockstore.ErrTokenMismatch):
		return "mismatch"
	}
	return permitFailure(err)
}

func permitFailure(err error) string {
	if errors.Is(err, lockstore.ErrUnavailable) || errors.Is(err, lockstore.ErrRefused) {
		return "unavailable"
	}
	return "error"
}

// Extend serves PATCH /semaphores/{key}: reset the TTL of the caller's
// permit.
func (h *Semaphores) Extend() http.Handler {
	type request struct {
		TTLms *int64 `json:"ttl_ms" validate:"omitnil,gte=10,maxttl"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req request
		key, token, err := h.parse(w, r, true, &req)
		if err != nil {
			WriteError(w, r, h.log, err)
			return
		}
		var ttl time.Duration // 0: the permit's own length
		if req.TTLms != nil {
			ttl = time.Duration(*req.TTLms) * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(r.Context(), h.limits.BackendTimeout)
		defer cancel()
		p, err := h.extend(ctx, key, token, ttl)
		if err != nil {
			WriteError(w, r, h.log, semError(err))
			return
		}
		w.Header().Set("ETag", `"`+token+`"`)
		encode(w, http.StatusOK, "application/json", newPermitBody(p))
	})
}

// Release serves DELETE /semaphores/{key}: give the caller's permit back,
// or with force=true&fence=N take back any, for a key's administrator.
func (h *Semaphores) Release() http.Handler {
	forcer, _ := h.sems.(lockstore.Forcer)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		force, fence, err := forceQuery(r)
		if err != nil {
			WriteError(w, r, h.log, err)
			return
		}
		if force {
			h.forceRelease(w, r, forcer, true, fence)
			return
		}
		key, token, err := h.keyAndToken(r, true)
		if err != nil {
			WriteError(w, r, h.log, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), h.limits.BackendTimeout)
		defer cancel()
		if err := h.release(ctx, key, token); err != nil {
			WriteError(w, r, h.log, semError(err))
			return
		}
		h.open.released(true, key, token)
		w.WriteHeader(http.StatusNoContent)
	})
}

// Inspect serves GET /semaphores/{key}: the limit and the holders, never
// a token, with an ETag naming the set of permits; with If-None-Match a
// conditional GET or a long-poll, with Accept: text/event-stream a stream
// (watch_sem.go).
func (h *Semaphores) Inspect() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, plain := h.routeGet(w, r, h.streamSem, h.conditionalSem)
		if !plain {
			return
		}
		s, err := h.inspect(r.Context(), key)
		if err != nil {
			WriteError(w, r, h.log, semError(err))
			return
		}
		h.writeSem(w, r, s)
	})
}
