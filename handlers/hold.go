package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgateway/lockgateway/lockstore"
)

// A hold is a lease that lives as long as a connection: a PUT with
// Accept: text/event-stream acquires as a plain PUT does, then answers
// with a stream of Server-Sent Events while the gateway renews the lease:
//
//	acquired  the grant (the body a 201 carries, the token included)
//	renewed   each renewal, with the new expires_at (no token)
//	released  the end: the holder's DELETE (through any gateway)
//	ended     the end: reason max-hold or shutdown; the gateway released it
//	lost      the end: reason backend-unavailable, expired or taken; sent
//	          before the last expires_at the holder was told, never after
//
// The client closing the stream releases the lease at once (or, with
// lock_delay_ms, keeps it that much longer, as Consul's lock-delay does:
// a holder that vanished, as opposed to one that let go, may still be at
// work). If the gateway dies, the lease ends at its TTL, which for holds
// is short (Limits.HoldTTL by default).

// Hold ends, as the final event's reason and the metric's label.
const (
	holdReleased    = "released"
	holdMaxHold     = "max-hold"
	holdShutdown    = "shutdown"
	holdClientGone  = "client-gone"
	holdUnavailable = "backend-unavailable"
	holdExpired     = "expired"
	holdTaken       = "taken"
)

// holdOptions are a hold's own request fields.
type holdOptions struct {
	maxHold   time.Duration // 0: only the server's cap
	lockDelay time.Duration // 0: release at once when the client goes
}

// holdEnd is the body of a hold's final event.
type holdEnd struct {
	Key    string `json:"key"`
	Reason string `json:"reason"`
	Fence  int64  `json:"fence"`
	// ExpiresAt is the last expires_at the holder was told.
	ExpiresAt string `json:"expires_at"`
}

// renewedBody is a renewal's event: the lease without its token.
type renewedBody struct {
	Key       string `json:"key"`
	Fence     int64  `json:"fence"`
	Owner     string `json:"owner,omitempty"`
	TTLms     int64  `json:"ttl_ms"`
	ExpiresAt string `json:"expires_at"`
}

// lostMargin is how long before the lease's safe end a hold whose
// renewals failed says lost: time for the event to leave, so that it is
// sent before the holder's expires_at, never after. A tenth of the TTL,
// at least 20 ms.
func lostMargin(ttl time.Duration) time.Duration { return max(ttl/10, 20*time.Millisecond) }

// hold streams lease's life to the client (see above) until it ends.
// status is the grant's (201, or 200 when the token already held it).
func (h *Locks) hold(w http.ResponseWriter, r *http.Request, status int, lease lockstore.Lease, user string, opts holdOptions) {
	key, token, ttl := lease.Key, lease.Token, lease.Granted
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: pass events on at once
	w.WriteHeader(status)
	write := func(event string, data any) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(2 * sseHeartbeat))
		var err error
		if event == "" {
			_, err = fmt.Fprint(w, ": heartbeat\n\n")
		} else {
			_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, jsonLine(data))
		}
		return err == nil && rc.Flush() == nil
	}
	h.obs.HoldStarted()
	ended := holdClientGone
	defer func() { h.obs.HoldEnded(ended) }()
	end := func(event, reason string) {
		ended = reason
		write(event, holdEnd{Key: key, Reason: reason, Fence: lease.Fence, ExpiresAt: timestamp(lease.ExpiresAt)})
	}
	if !write("acquired", newLeaseBody(lease)) {
		h.endHold(key, token, user, opts.lockDelay)
		return
	}

	watch := h.hub.Watch(key) // a release through any gateway
	defer watch.Close()
	heartbeat := time.NewTicker(sseHeartbeat)
	defer heartbeat.Stop()
	maxHold := h.limits.MaxHold
	if opts.maxHold > 0 && (maxHold == 0 || opts.maxHold < maxHold) {
		maxHold = opts.maxHold
	}
	var capped <-chan time.Time
	if maxHold > 0 {
		t := time.NewTimer(maxHold)
		defer t.Stop()
		capped = t.C
	}

	// One renewal at a time, sent with other holds' by the renewer (in a
	// batch where the store allows), so that the deadline below fires on
	// time even while a renewal waits for the backend.
	interval := ttl / 3
	ext := lockstore.Extension{Key: key, Token: token, User: user, TTL: ttl}
	// Each renewal is a span under the hold's request span (a no-op when
	// the request is not traced): from when it is due to its outcome.
	tracer := trace.SpanFromContext(r.Context()).TracerProvider().Tracer("github.com/lockgateway/lockgateway/handlers")
	var span trace.Span
	renew := func(at time.Time) <-chan renewal {
		_, span = tracer.Start(r.Context(), "hold renewal", trace.WithTimestamp(at))
		return h.renewer.renew(at, ext)
	}
	defer func() { // the one pending when the hold ends (a no-op on an ended span)
		span.SetAttributes(attribute.String("lockgw.hold.renewal", "hold-ended"))
		span.End()
	}()
	renewed := renew(time.Now().Add(interval))
	lost := time.NewTimer(time.Until(lease.ExpiresAt.Add(-lostMargin(ttl))))
	defer lost.Stop()

	for {
		select {
		case got := <-renewed:
			span.SetAttributes(attribute.String("lockgw.hold.renewal", renewalOutcome(got.err)))
			span.End()
			switch {
			case got.err == nil:
				if got.lease.ExpiresAt.After(lease.ExpiresAt) {
					lease.ExpiresAt = got.lease.ExpiresAt
				}
				lost.Reset(time.Until(lease.ExpiresAt.Add(-lostMargin(ttl))))
				renewed = renew(time.Now().Add(interval))
				h.obs.Extended(token, lease.ExpiresAt)
				if !write("renewed", renewedBody{Key: key, Fence: lease.Fence, Owner: lease.Owner, TTLms: ttl.Milliseconds(), ExpiresAt: timestamp(lease.ExpiresAt)}) {
					h.endHold(key, token, user, opts.lockDelay)
					return
				}
			case errors.Is(got.err, lockstore.ErrNotHeld):
				end("lost", holdExpired)
				return
			case errors.Is(got.err, lockstore.ErrTokenMismatch):
				end("lost", holdTaken)
				return
			default: // try again soon, while the lease lasts
				renewed = renew(time.Now().Add(max(interval/4, 10*time.Millisecond)))
			}
		case <-lost.C:
			// No renewal was confirmed in time: the holder must stop now,
			// before its lease may end. The lease is left to its TTL (a
			// renewal still on its way may yet land).
			end("lost", holdUnavailable)
			return
		case <-watch.Ready():
			u, ok := watch.Latest()
			if !ok || u.Err != nil || time.Now().After(lease.ExpiresAt) {
				continue
			}
			switch {
			case !u.State.Held:
				// Free while the holder's lease was valid: only its token
				// could release it.
				end("released", holdReleased)
				return
			case u.State.Lease.Fence != lease.Fence:
				end("lost", holdTaken)
				return
			}
		case <-heartbeat.C:
			if !write("", nil) {
				h.endHold(key, token, user, opts.lockDelay)
				return
			}
		case <-capped:
			h.releaseHeld(key, token, user)
			end("ended", holdMaxHold)
			return
		case <-h.stopping:
			h.releaseHeld(key, token, user)
			end("ended", holdShutdown)
			return
		case <-r.Context().Done():
			h.endHold(key, token, user, opts.lockDelay)
			return
		}
	}
}

// renewalOutcome names a renewal's outcome for its span.
func renewalOutcome(err error) string {
	switch {
	case err == nil:
		return "renewed"
	case errors.Is(err, lockstore.ErrNotHeld):
		return "expired"
	case errors.Is(err, lockstore.ErrTokenMismatch):
		return "taken"
	}
	return "unavailable"
}

type renewal struct {
	lease lockstore.Lease
	err   error
}

// endHold ends a hold whose client went away: the lease is released at
// once, or with a lock delay kept that much longer (extended, never
// shortened), so that nobody else takes the key while a holder that
// vanished may still be at work.
func (h *Locks) endHold(key, token, user string, lockDelay time.Duration) {
	if lockDelay <= 0 {
		h.releaseHeld(key, token, user)
		return
	}
	ctx, cancel := context.WithTimeout(h.userContext(user), h.backendTimeout())
	defer cancel()
	if _, err := h.store.Extend(ctx, key, token, lockDelay); err != nil && !errors.Is(err, lockstore.ErrNotHeld) {
		h.log.Warn().Err(err).Str("key", key).Msg("hold: the lock delay could not be applied; the lease ends at its TTL")
	}
}

// releaseHeld releases a hold's lease with a context of its own (the
// request's may be what ended).
func (h *Locks) releaseHeld(key, token, user string) {
	ctx, cancel := context.WithTimeout(h.userContext(user), h.backendTimeout())
	defer cancel()
	err := h.store.Release(ctx, key, token)
	switch {
	case err == nil:
		h.obs.Released(token)
	case errors.Is(err, lockstore.ErrNotHeld), errors.Is(err, lockstore.ErrTokenMismatch):
	default:
		h.log.Warn().Err(err).Str("key", key).Msg("hold: release failed; the lease ends at its TTL")
	}
}

func (h *Locks) backendTimeout() time.Duration {
	if h.limits.BackendTimeout > 0 {
		return h.limits.BackendTimeout
	}
	return 5 * time.Second
}

// userContext carries the quota user a release names, as a request's does.
func (h *Locks) userContext(user string) context.Context {
	if user == "" {
		return context.Background()
	}
	return lockstore.WithUser(context.Background(), user)
}
