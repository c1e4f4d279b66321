package handlers

// What an acquire of a lock and of a permit share, from the handler's
// entry to its answer (a waiting acquire's bound and span are in
// waits.go): serving it or its hold, its lease length, its answer when
// it failed or its client can no longer learn it, and the release of a
// grant nobody will learn of.

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/lockgateway/lockgateway/internal/aside"
	"github.com/lockgateway/lockgateway/lockstore"
)

// serveAcquire serves an acquire of a lock or a permit: a hold's acquire
// runs aside (internal/aside), on another goroutine, so its frames never
// grow the stack the hold then parks on here (holdStream); or, where it takes its connection
// over, on a goroutine of its own (hold_conn.go), and the handler returns.
func serveAcquire(acquire func(http.ResponseWriter, *http.Request) *holdStream) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !wantsStream(r) {
			acquire(w, r)
			return
		}
		s := aside.Run(func() *holdStream { return acquire(w, r) })
		if s == nil || s.takingOver && s.takeOver() {
			return
		}
		s.run()
	})
}

// answered answers an acquire of a lease (what: "lock", "permit") that
// failed, or whose grant its client can no longer learn, and reports
// whether it did; the caller answers the others, grants. A token the
// client chose is its own to act on, whatever happens here: the client may
// already have retried with it and been told it holds the lease. Ours must
// reach the client with the answer, or the lease must go (release, under a
// context of its own).
func (h *Locks) answered(w http.ResponseWriter, r *http.Request, err error, ours, renewed bool, token, what string, release func(context.Context) error) bool {
	switch {
	case err != nil && ours && outcomeUnknown(err) && clientGone(r):
		// The grant may still land, late, and nobody could release it.
		go h.releaseLateWith(what, release)
		WriteError(w, r, h.log, err)
	case err != nil && ours && outcomeUnknown(err):
		WriteError(w, r, h.log, withToken(err, token))
	case err != nil:
		WriteError(w, r, h.log, err)
	case ours && !renewed && clientGone(r):
		// The client left while we took the lease: it will never learn
		// the token, so nobody could release it before it expires.
		h.releaseAbandonedWith(what, release)
	default:
		return false
	}
	return true
}

// ttl is an acquire's lease length: ttlMs when the request names one,
// else a hold's (HoldTTL) or the gateway's default.
func (h *Locks) ttl(holding bool, ttlMs *int64) time.Duration {
	switch {
	case ttlMs != nil:
		return time.Duration(*ttlMs) * time.Millisecond
	case holding && h.limits.HoldTTL > 0:
		return h.limits.HoldTTL
	}
	return h.limits.DefaultTTL
}

// releaseLateWith releases a grant that may land after its acquire gave up
// (a Redis busy past the backend timeout runs the script when it catches
// up) for a client that left without the token; what names the lease in
// the log. It releases until a release frees the lease, or the store has
// answered for a second (by then what was on its way to it has run), or
// the longest lease has passed, or the server stops.
func (h *Locks) releaseLateWith(what string, release func(context.Context) error) {
	giveUp := time.Now().Add(h.limits.MaxTTL)
	var answered time.Time
	pause := 25 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), h.limits.BackendTimeout)
		err := release(ctx)
		cancel()
		switch {
		case err == nil:
			h.log.Warn().Msg("released a " + what + " granted to a client that had left")
			return
		case errors.Is(err, lockstore.ErrNotHeld), errors.Is(err, lockstore.ErrTokenMismatch):
			if answered.IsZero() {
				answered = time.Now()
			}
			if time.Since(answered) >= time.Second {
				return
			}
			pause = 100 * time.Millisecond
		default: // no answer: back off while the store is down
			pause = min(2*pause, time.Second)
		}
		if time.Now().After(giveUp) {
			h.log.Warn().Msg("gave up releasing a " + what + " whose client left while the backend did not answer; if it was granted, it expires")
			return
		}
		select {
		case <-time.After(pause):
		case <-h.stopping:
			return
		}
	}
}

// releaseAbandonedWith releases a lease (what names it) granted to a
// client that left before it could learn the token; a store that did not
// answer gets releaseLateWith.
func (h *Locks) releaseAbandonedWith(what string, release func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), h.limits.BackendTimeout)
	defer cancel()
	err := release(ctx)
	switch {
	case err == nil, errors.Is(err, lockstore.ErrNotHeld):
	case errors.Is(err, lockstore.ErrUnavailable):
		go h.releaseLateWith(what, release)
	default:
		h.log.Warn().Err(err).Msg("could not release a " + what + " its client abandoned; it will expire")
	}
}
