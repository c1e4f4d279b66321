package handlers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgateway/lockgateway/lockstore"
)

// A hold is a lease (a lock's, or a permit of a semaphore) that lives as
// long as a connection: a PUT with Accept: text/event-stream acquires as a
// plain PUT does, then answers with a stream of Server-Sent Events while
// the gateway renews the lease:
//
//	acquired  the grant (the body a 201 carries, the token included)
//	renewed   each renewal, with the new expires_at (no token)
//	released  the end: the holder's DELETE (through any gateway: through
//	          this one at once, through another at the next renewal)
//	ended     the end: reason max-hold or shutdown; the gateway releases
//	          the lease once the client closed the stream (endByGateway)
//	lost      the end: reason backend-unavailable, expired, taken, or
//	          forced (an administrator's forced release); sent before the
//	          last expires_at the holder was told, never after
//
// A hold costs the backend its renewals alone, sent in batches
// (hold_renewer.go): it does not watch its key (a watch reads the key
// again after every renewal, and every poll, one call each). What a watch
// would tell a hold, its renewals tell it too, within a third of the TTL:
// a lease freed or taken while valid. A DELETE through this gateway tells
// it at once (openHolds).
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
	holdForced      = "forced"
)

// holdOptions are a hold's own request fields.
type holdOptions struct {
	maxHold   time.Duration // 0: only the server's cap
	lockDelay time.Duration // 0: release at once when the client goes
	// atLeast: the lock's hold_at_least_ms. A client gone with a lock
	// delay keeps the lease (extended, not released) at least until then
	// from the grant's answer, as a release would keep it (rule L).
	atLeast time.Duration
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

// closeWait is how long a hold the gateway ended waits for its client to
// close the stream before it leaves the lease to its TTL (endByGateway):
// lostMargin, as long as a stream's connection lingers for the client's
// close at least, and at most 5 s, so that a client that keeps a stream of
// a long TTL open does not hold the gateway's shutdown up for long.
func closeWait(ttl time.Duration) time.Duration {
	return min(max(lostMargin(ttl), linger), 5*time.Second)
}

// held is what a hold keeps, a lock's lease or a permit, and how the
// hold acts on it.
type held struct {
	key, token string
	fence      int64
	owner      string
	ttl        time.Duration // each renewal's length: the grant's
	expiresAt  time.Time     // the last conservative end the holder was told
	grant      any           // the acquired event's body
	// permit: a permit is never taken by another token (a renewal that
	// finds none of the token's permits means it expired), and its
	// renewals and releases are not metered as a lock's extends and
	// releases are.
	permit bool
	// renew asks for a renewal at at (hold_renewer.go), and calls wake
	// (when not nil) once its outcome is on the channel; dropRenewal, the
	// last one's cancel, drops it unless it went out (stopRenewing).
	renew       func(at time.Time, wake func()) (<-chan renewal, func())
	dropRenewal func()
	// release lets the lease go; extend sets it to ttl from now.
	release func(ctx context.Context) error
	extend  func(ctx context.Context, ttl time.Duration) error
	// atLeastUntil: a lock granted with hold_at_least_ms is kept from
	// every token until then (at least), whatever ends the hold.
	atLeastUntil time.Time
}

// holdLock starts a lock's hold (see hold). user is whom the lease
// counts against ("" for nobody).
func (h *Locks) holdLock(w http.ResponseWriter, r *http.Request, status int, lease lockstore.Lease, user string, opts holdOptions) *holdStream {
	ext := lockstore.Extension{Key: lease.Key, Token: lease.Token, User: user, TTL: lease.Granted}
	return h.hold(w, r, status, &held{
		key: lease.Key, token: lease.Token, fence: lease.Fence, owner: lease.Owner,
		ttl: lease.Granted, expiresAt: lease.ExpiresAt, grant: newLeaseBody(lease),
		renew: func(at time.Time, wake func()) (<-chan renewal, func()) { return h.renewer.renew(at, ext, wake) },
		release: func(c context.Context) error {
			return h.store.Release(userContext(c, user), lease.Key, lease.Token)
		},
		extend: func(c context.Context, ttl time.Duration) error {
			_, err := h.store.Extend(userContext(c, user), lease.Key, lease.Token, ttl)
			return err
		},
		atLeastUntil: time.Now().Add(opts.atLeast), // after the grant's answer: no earlier than its end
	}, opts)
}

// holdPermit starts a permit's hold (see hold).
func (h *Semaphores) holdPermit(w http.ResponseWriter, r *http.Request, status int, p lockstore.Permit, opts holdOptions) *holdStream {
	ext := lockstore.Extension{Key: p.Key, Token: p.Token, TTL: p.Granted}
	return h.hold(w, r, status, &held{
		key: p.Key, token: p.Token, fence: p.Fence, owner: p.Owner,
		ttl: p.Granted, expiresAt: p.ExpiresAt, grant: newPermitBody(p), permit: true,
		renew:   func(at time.Time, wake func()) (<-chan renewal, func()) { return h.permits.renew(at, ext, wake) },
		release: func(c context.Context) error { return h.release(c, p.Key, p.Token) },
		extend: func(c context.Context, ttl time.Duration) error {
			_, err := h.extend(c, p.Key, p.Token, ttl)
			return err
		},
	}, opts)
}

// holdStream is an open hold: what its loop (run) needs, in one
// allocation.
//
// Memory (issue 28: 10 000 holds on one gateway): the request's goroutine
// stays parked in run for the whole hold, and a goroutine keeps the
// largest stack it ever needed (an acquire through go-redis takes it to
// 16 KiB) unless the collector finds less than a quarter of it in use
// (about 3.2 KiB of 16, less its nosplit allowance), when it halves it.
// net/http's and the middlewares' frames take most of that quarter, so
// the hold parks in a small frame: the handler returns from the acquire
// and from hold before it calls run, run's frame is a select and little
// else, and everything else (writes, ends, timers) is in methods it
// calls, whose frames come and go. One timer serves the heartbeat, the
// lost deadline and max_hold, and the stream's state lives here rather
// than in closures and the variables they capture.
//
// That is the fallback. Where it can (hold_conn.go), the hold takes its
// connection over from net/http once the grant is sent, and serve drives
// it instead of run: then no request, ResponseWriter or net/http goroutine
// is kept, only conn.
type holdStream struct {
	h *Locks
	// The request's, while net/http serves the stream (run); nil once
	// the hold took its connection over (conn).
	w     http.ResponseWriter
	rc    *http.ResponseController
	r     *http.Request
	conn  *holdConn
	lease *held
	opts  holdOptions
	open  *openHold
	ended string // the end's reason, for the metric

	// The one pending renewal (hold_renewer.go) and its span, a child of
	// the request's, which ctx carries (and nothing else of the request).
	renewed  <-chan renewal
	span     trace.Span
	tracer   trace.Tracer
	ctx      context.Context
	interval time.Duration

	// What the timer waits for: the next heartbeat, the moment to say
	// lost (no renewal confirmed in time), max_hold's end (zero: none).
	// Monotonic readings, as the timers these stand for were. serve has
	// no timer: its read deadline is.
	timer               *time.Timer
	beatAt, lostAt, cap time.Time
	// takingOver: the stream is to be served on its connection, taken
	// over from net/http (hold_conn.go), as the response's headers say.
	takingOver bool
	// releaseOnClose: the gateway ended the hold (endByGateway), and
	// hangUp releases the lease once the client closed the connection.
	releaseOnClose bool
}

// hold starts streaming the life of a lease or a permit to the client
// (see above): it sends the acquired event and returns the stream for the
// handler to run until it ends, or nil when it ended already. status is
// the grant's (201, or 200 when the token already held it).
//
// The handler calls run itself, after hold and the acquire returned, so
// that the request's goroutine parks in run's frame alone (holdStream).
func (h *Locks) hold(w http.ResponseWriter, r *http.Request, status int, lease *held, opts holdOptions) *holdStream {
	s := &holdStream{h: h, w: w, r: r, lease: lease, opts: opts, ended: holdClientGone, rc: http.NewResponseController(w)}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: pass events on at once
	if s.takingOver = h.conns != nil && canTakeOver(r); s.takingOver {
		// The connection ends with the stream: net/http cannot have it
		// back, and a client must not send another request on it.
		w.Header().Set("Connection", "close")
	}
	w.WriteHeader(status)
	h.obs.HoldStarted()
	// Listed as held by a stream from before the holder can know its
	// token, so that its DELETE through this gateway always finds it.
	s.open = h.open.add(lease.permit, lease.key, lease.token, lease.fence)
	ok := s.write("acquired", lease.grant)
	lease.grant = nil // sent: nothing keeps it
	if !ok {
		h.letGo(lease, opts.lockDelay)
		s.finish()
		return nil
	}
	start := time.Now()
	s.beatAt = start.Add(sseHeartbeat)
	maxHold := h.limits.MaxHold
	if opts.maxHold > 0 && (maxHold == 0 || opts.maxHold < maxHold) {
		maxHold = opts.maxHold
	}
	if maxHold > 0 {
		s.cap = start.Add(maxHold)
	}
	// One renewal at a time, sent with other holds' by the renewer (in a
	// batch where the store allows), so that the deadline below fires on
	// time even while a renewal waits for the backend. The first is asked
	// for by run or serve, which wait for it.
	s.interval = lease.ttl / 3
	// Each renewal is a span under the hold's request span (a no-op when
	// the request is not traced): from when it is due to its outcome.
	span := trace.SpanFromContext(r.Context())
	s.tracer = span.TracerProvider().Tracer("github.com/lockgateway/lockgateway/handlers")
	s.ctx = trace.ContextWithSpan(context.Background(), span)
	s.setLost()
	return s
}

// run waits for what ends or feeds the stream until the hold ends. Keep
// its frame small (see holdStream): the request's goroutine is parked
// here for the whole hold.
func (s *holdStream) run() {
	defer s.finish()
	s.renew(time.Now().Add(spread(s.interval)))
	s.timer = time.NewTimer(time.Until(s.next()))
	done := s.r.Context().Done()
	for {
		select {
		case got := <-s.renewed:
			if !s.renewal(got) {
				return
			}
		case <-s.timer.C:
			if !s.due() {
				return
			}
		case <-s.open.released:
			s.end(s.open.freed())
			return
		case <-s.h.stopping:
			s.endByGateway(holdShutdown)
			return
		case <-done:
			s.h.letGo(s.lease, s.opts.lockDelay)
			return
		}
	}
}

// finish is what a hold does last, however it ended.
//
//go:noinline
func (s *holdStream) finish() {
	s.lease.stopRenewing()
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.span != nil { // the one pending when the hold ends (a no-op on an ended span)
		s.span.SetAttributes(attribute.String("lockgw.hold.renewal", "hold-ended"))
		s.span.End()
	}
	s.h.open.remove(s.open)
	s.h.obs.HoldEnded(s.ended)
}

// write sends an event (a heartbeat comment when event is "") and reports
// whether it left.
//
//go:noinline
func (s *holdStream) write(event string, data any) bool {
	p := []byte(": heartbeat\n\n")
	if event != "" {
		p = fmt.Appendf(nil, "event: %s\ndata: %s\n\n", event, jsonLine(data))
	}
	if s.conn != nil {
		return s.conn.write(p) == nil
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(2 * sseHeartbeat))
	_, err := s.w.Write(p)
	return err == nil && s.rc.Flush() == nil
}

// over reports whether the last end the holder was told has come. From
// then on the holder has stopped by its own clock, and the stream says
// nothing more: a lost said now would come after the end it must
// precede. That happens when this goroutine could not run past the end
// (the process stopped, its host frozen, a write that stalled): the
// stream then closes without a final event.
func (s *holdStream) over() bool {
	return !time.Now().Before(s.lease.expiresAt.Truncate(time.Millisecond)) // as told: whole ms
}

// end sends the final event (unless over) and notes the reason.
//
//go:noinline
func (s *holdStream) end(event, reason string) {
	s.ended = reason
	if s.over() {
		return
	}
	l := s.lease
	s.write(event, holdEnd{Key: l.key, Reason: reason, Fence: l.fence, ExpiresAt: timestamp(l.expiresAt)})
}

// endByGateway ends a hold the gateway ends (max-hold, shutdown): the
// holder is told first, and the lease is let go only once the client has
// closed its end of the stream, which says it heard and let go, as a
// client that closes the stream does. Released before that, another
// client could be granted the key while the holder, told nothing yet,
// still held it by everything it had heard (found by review). A stream
// still open closeWait after the event leaves the lease to end at its
// TTL, as lost does. On a connection taken over, hangUp waits for the
// close (releaseOnClose); here, the request's context ends with it.
//
//go:noinline
func (s *holdStream) endByGateway(reason string) {
	s.end("ended", reason)
	if s.conn != nil {
		s.releaseOnClose = true
		return
	}
	t := time.NewTimer(closeWait(s.lease.ttl))
	defer t.Stop()
	select {
	case <-s.r.Context().Done():
		s.h.releaseHeld(s.lease)
	case <-t.C:
	}
}

// renew asks for the next renewal at at, under a span of its own.
func (s *holdStream) renew(at time.Time) {
	_, s.span = s.tracer.Start(s.ctx, "hold renewal", trace.WithTimestamp(at))
	var wake func()
	if s.conn != nil {
		wake = s.conn.wakeFn
	}
	s.renewed, s.lease.dropRenewal = s.lease.renew(at, wake)
}

// stopRenewing drops the hold's queued renewal unless it went out: a hold
// that ended renews nothing (its lock delay's extend, which never
// shortens a lease, kept the key a whole TTL longer when the queued
// renewal went out after it: found by review). A renewal already on its
// way may still land; the lease then lasts until that renewal's end.
func (l *held) stopRenewing() {
	if l.dropRenewal != nil {
		l.dropRenewal()
	}
}

// spread is d less up to an eighth of it, at random: when the next
// renewal is asked for. Holds whose renewals were answered together (one
// batch) would otherwise renew together for good, and clumps that meet
// merge: with 5 000 holds on Redlock, batches grew to 1 400 leases, which
// the nodes could not answer in time, and every hold of such a batch
// failed with it. Renewing up to an eighth early costs at most that many
// more renewals.
func spread(d time.Duration) time.Duration { return d - rand.N(d/8+1) }

// setLost sets when a hold whose renewals failed says lost: its lease's
// safe end less lostMargin.
func (s *holdStream) setLost() {
	s.lostAt = time.Now().Add(time.Until(s.lease.expiresAt.Add(-lostMargin(s.lease.ttl))))
}

// next is the earliest thing the timer waits for.
func (s *holdStream) next() time.Time {
	t := s.beatAt
	if s.lostAt.Before(t) {
		t = s.lostAt
	}
	if !s.cap.IsZero() && s.cap.Before(t) {
		t = s.cap
	}
	return t
}

// renewal acts on a renewal's outcome and reports whether the hold goes on.
//
//go:noinline
func (s *holdStream) renewal(got renewal) bool {
	s.span.SetAttributes(attribute.String("lockgw.hold.renewal", renewalOutcome(got.err)))
	s.span.End()
	lease := s.lease
	switch {
	case got.err == nil && s.over():
		// Renewed, but too late to tell: the holder stopped at the
		// end it was told, and nobody works under this lease.
		s.h.releaseHeld(lease)
		s.ended = holdExpired
		return false
	case got.err == nil:
		if got.expires.After(lease.expiresAt) {
			lease.expiresAt = got.expires
		}
		s.setLost()
		s.rearm()
		s.renew(time.Now().Add(spread(s.interval)))
		if !lease.permit {
			s.h.obs.Extended(lease.token, lease.expiresAt)
		}
		if !s.write("renewed", renewedBody{Key: lease.key, Fence: lease.fence, Owner: lease.owner, TTLms: lease.ttl.Milliseconds(), ExpiresAt: timestamp(lease.expiresAt)}) {
			s.h.letGo(lease, s.opts.lockDelay)
			return false
		}
	case errors.Is(got.err, lockstore.ErrNotHeld), errors.Is(got.err, lockstore.ErrTokenMismatch):
		s.end(leaseGone(lease, got.err, s.open))
		return false
	default: // try again soon, while the lease lasts
		s.renew(time.Now().Add(spread(max(s.interval/4, 10*time.Millisecond))))
	}
	return true
}

// due acts on what the timer found due and reports whether the hold goes
// on.
//
//go:noinline
func (s *holdStream) due() bool {
	now := time.Now()
	switch {
	case !now.Before(s.lostAt):
		// No renewal was confirmed in time: the holder must stop now,
		// before its lease may end. The lease is left to its TTL (a
		// renewal still on its way may yet land).
		s.end("lost", holdUnavailable)
		return false
	case !s.cap.IsZero() && !now.Before(s.cap):
		s.endByGateway(holdMaxHold)
		return false
	case !now.Before(s.beatAt):
		if !s.write("", nil) {
			s.h.letGo(s.lease, s.opts.lockDelay)
			return false
		}
		for !s.beatAt.After(now) { // as a ticker: ticks missed are dropped
			s.beatAt = s.beatAt.Add(sseHeartbeat)
		}
	}
	s.rearm()
	return true
}

// rearm sets run's timer for next (serve's deadline is set as it reads).
func (s *holdStream) rearm() {
	if s.timer != nil {
		s.timer.Reset(time.Until(s.next()))
	}
}

// leaseGone is the final event and its reason of a hold whose renewal
// found its lease gone: err is ErrNotHeld (the key is free) or
// ErrTokenMismatch (another token holds the lock; for a semaphore,
// permits are held but none of the token's). A lock held by another token
// was taken. A lease gone before its end (the answer came before the last
// expires_at the holder was told) was freed by its token, the one thing
// that frees a lease early, through this gateway or another: released.
// (A permit is never taken by another token.) Past its end, it expired.
func leaseGone(lease *held, err error, open *openHold) (event, reason string) {
	select {
	case <-open.released: // a DELETE through this gateway, whatever came since
		return open.freed()
	default:
	}
	switch {
	case errors.Is(err, lockstore.ErrForced): // through another gateway
		return "lost", holdForced
	case !lease.permit && errors.Is(err, lockstore.ErrTokenMismatch):
		return "lost", holdTaken
	case time.Now().Before(lease.expiresAt):
		return "released", holdReleased
	}
	return "lost", holdExpired
}

// renewalOutcome names a renewal's outcome for its span.
func renewalOutcome(err error) string {
	switch {
	case err == nil:
		return "renewed"
	case errors.Is(err, lockstore.ErrForced):
		return "forced"
	case errors.Is(err, lockstore.ErrNotHeld):
		return "expired"
	case errors.Is(err, lockstore.ErrTokenMismatch):
		return "taken"
	}
	return "unavailable"
}

// renewal is a renewal's outcome: the lease's new conservative end.
type renewal struct {
	expires time.Time
	err     error
}

// letGo ends a hold whose client went away: the lease is released at
// once, or with a lock delay kept that much longer (extended, never
// shortened), so that nobody else takes the key while a holder that
// vanished may still be at work.
func (h *Locks) letGo(lease *held, lockDelay time.Duration) {
	lease.stopRenewing()
	if lockDelay <= 0 {
		h.releaseHeld(lease)
		return
	}
	// An extend does what a release would not: it keeps the lease to
	// now+lockDelay only, so a lock held at least until some time is
	// extended to then at least (rule L: the end of a hold is a release).
	lockDelay = max(lockDelay, time.Until(lease.atLeastUntil).Round(time.Millisecond)+time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), h.backendTimeout())
	defer cancel()
	if err := lease.extend(ctx, lockDelay); err != nil && !errors.Is(err, lockstore.ErrNotHeld) {
		h.log.Warn().Err(err).Str("key", lease.key).Msg("hold: the lock delay could not be applied; the lease ends at its TTL")
	}
}

// releaseHeld releases a hold's lease with a context of its own (the
// request's may be what ended).
func (h *Locks) releaseHeld(lease *held) {
	lease.stopRenewing()
	ctx, cancel := context.WithTimeout(context.Background(), h.backendTimeout())
	defer cancel()
	err := lease.release(ctx)
	switch {
	case err == nil:
		if !lease.permit {
			h.obs.Released(lease.token)
		}
	case errors.Is(err, lockstore.ErrNotHeld), errors.Is(err, lockstore.ErrTokenMismatch):
	default:
		h.log.Warn().Err(err).Str("key", lease.key).Msg("hold: release failed; the lease ends at its TTL")
	}
}

func (h *Locks) backendTimeout() time.Duration {
	if h.limits.BackendTimeout > 0 {
		return h.limits.BackendTimeout
	}
	return 5 * time.Second
}

// userContext carries the quota user a lease counts against, as a
// request's does.
func userContext(ctx context.Context, user string) context.Context {
	if user == "" {
		return ctx
	}
	return lockstore.WithUser(ctx, user)
}
