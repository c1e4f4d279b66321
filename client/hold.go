package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Hold and HoldPermit hold a lease through the gateway's event stream (a
// PUT with Accept: text/event-stream; docs/api.md, "Holding a lock"): the
// gateway renews the lease while the stream is open and says on it when
// the lease ends, and closing the stream releases the lease at once.

// holdLockDelay is the lock_delay_ms of a hold with HoldAtLeast. Closing a
// hold's stream releases the lease at once, which would undo the extend
// HoldAtLeast makes before Hold closes it. With a lock delay the gateway
// extends the lease by the delay instead of releasing it, and an extend
// never shortens a lease: so the shortest one it takes (10 ms, the least
// TTL) leaves the lease as HoldAtLeast's extend set it. A longer delay
// would keep the key past HoldAtLeast by as long as fn ran.
const holdLockDelay = 10 * time.Millisecond

// Hold acquires key, runs fn under the lock and releases the lock when fn
// returns. It holds the lock through the gateway's event stream: the
// gateway renews the lease while fn runs (every TTL/3; opts.TTL, 0 for the
// gateway's hold TTL). Hold cancels fn's context the moment the lease is
// lost: when the stream says lost (the lease expired, another token took
// it, or the gateway could not renew it in time; the gateway says so
// before the lease's end), when the stream ends otherwise (a DELETE with
// the lease's token, from anywhere; max hold; the gateway shutting down),
// when the connection breaks, or when no renewal was heard by the lease's
// end (a gateway or a network that went silent) — never later than that.
// fn must return when its context ends; then Hold returns an error
// matching ErrLockLost (joined with fn's error unless that is just the
// cancellation) and, by the reason, ErrNotHeld (expired, released),
// ErrTokenMismatch (taken) or ErrUnavailable (no renewal got through, the
// gateway shut down, the stream broke or went silent).
//
// Otherwise Hold releases the lease (a DELETE with its token, then it
// closes the stream) and returns fn's error, joined with the release's
// when the release fails. Errors from acquiring are Acquire's. An
// http.Client given with WithHTTPClient must have no Timeout, or every
// hold ends, lost, after it.
//
// fn's context ending is the signal to stop, but it cannot stop a process
// that is paused: pass lease.Fence downstream with every write (see the
// package documentation). The *Lease fn gets is the one acquired: its Fence
// and Token never change; its ExpiresAt is not updated by renewals.
func (c *Client) Hold(ctx context.Context, key string, opts AcquireOptions, fn func(ctx context.Context, lease *Lease) error) error {
	return hold(ctx, c, opts, holdKind[*Lease]{
		key:       key,
		noun:      "lock",
		releaseOp: "release",
		busy:      ErrHeld,
		// The gateway keeps a lock's key for HoldAtLeast itself
		// (hold_at_least_ms): through the release after fn, and through
		// the end of the stream should this process die first.
		atLeastByGateway: true,
		open: func(ctx context.Context, token string, wait, lockDelay time.Duration) (*http.Response, error) {
			var body AcquireRequest
			body.TtlMs, body.WaitMs, body.Owner = acquireFields(opts, wait)
			body.LockDelayMs = optionalMillis(lockDelay)
			// Whole milliseconds, rounded up: never less than asked.
			body.HoldAtLeastMs = optionalMillis((opts.HoldAtLeast + time.Millisecond - 1).Truncate(time.Millisecond))
			return c.api.ClientInterface.AcquireLock(ctx, key, &AcquireLockParams{LockToken: &token}, body, acceptEventStream)
		},
		grant: func(data []byte, sent time.Time) (*Lease, error) {
			var b APILease
			if err := json.Unmarshal(data, &b); err != nil || b.Token == "" {
				return nil, fmt.Errorf("acquired event without a lease: %q", data)
			}
			return newLease(b, sent), nil
		},
		lease: func(l *Lease) *Lease {
			kept := *l // fn may do what it likes with its copy
			return &kept
		},
		extend:  c.Extend,
		release: c.Release,
	}, fn)
}

// holdKind is what hold needs of a kind of grant G (*Lease, *Permit).
type holdKind[G any] struct {
	key             string
	noun, releaseOp string // in errors: "lock", "release"
	// atLeastByGateway: the gateway honours HoldAtLeast (hold_at_least_ms,
	// locks); otherwise (permits) hold does, by an extend before the
	// release and a lock delay on the stream.
	atLeastByGateway bool
	busy             error // the key is taken: ErrHeld, ErrSemaphoreFull
	// open sends the hold's PUT (Accept: text/event-stream) for token,
	// waiting up to wait, with lock_delay_ms lockDelay when it is not 0.
	open func(ctx context.Context, token string, wait, lockDelay time.Duration) (*http.Response, error)
	// grant reads the acquired event's data, of a PUT sent at sent.
	grant func(data []byte, sent time.Time) (G, error)
	// lease is a copy of g's key, token, TTL and deadline, for keeping
	// and releasing it.
	lease   func(g G) *Lease
	extend  func(ctx context.Context, key, token string, ttl time.Duration) (*Lease, error)
	release func(ctx context.Context, key, token string) error
}

// hold is Hold and HoldPermit: acquire through a stream, watch it while
// fn runs, release after.
func hold[G any](ctx context.Context, c *Client, opts AcquireOptions, k holdKind[G], fn func(ctx context.Context, g G) error) error {
	var lockDelay time.Duration
	if opts.HoldAtLeast > 0 && !k.atLeastByGateway {
		lockDelay = holdLockDelay
	}
	var st *holdStream
	g, err := acquireWaiting(ctx, c, opts, k.busy, func(ctx context.Context, token string, wait time.Duration) (G, error) {
		got, s, err := openHold(ctx, k, token, wait, lockDelay)
		st = s
		return got, err
	})
	if err != nil {
		return err
	}
	defer st.close()
	granted := time.Now() // after the grant: HoldAtLeast counts no less
	kept := k.lease(g)
	if opts.Wait > 0 {
		// A waited-for lease began when the wait ended, somewhere inside
		// the request, so counted from the request's start (all this
		// client can be sure of) it may look over already: a wait longer
		// than the TTL would lose the lock at once. An extend restarts it
		// from a moment we know (an extend never shortens a lease, so it
		// cannot cut the gateway's renewals short). If it fails, the
		// first count stands.
		if l, err := k.extend(ctx, kept.Key, kept.Token, 0); err == nil {
			kept.ExpiresAt, kept.deadline = l.ExpiresAt, l.deadline
		}
	}
	fnCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	var (
		wg   sync.WaitGroup
		lost error
	)
	wg.Go(func() { lost = keep(fnCtx, kept, st, stop, cancel) })
	fnErr := fn(fnCtx, g)
	close(stop)
	wg.Wait()
	if lost != nil {
		if fnErr != nil && !errors.Is(fnErr, context.Canceled) {
			return errors.Join(lost, fnErr)
		}
		return lost
	}

	// Release even when ctx has ended: a lock left behind blocks others
	// until its TTL runs out. A DELETE rather than just closing the
	// stream: its answer says whether the lease was still ours. Closing
	// the stream (deferred) releases it too, should the DELETE fail.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer rcancel()
	let := func() error { return k.release(rctx, kept.Key, kept.Token) }
	if left := time.Until(granted.Add(opts.HoldAtLeast)); left > 0 && !k.atLeastByGateway {
		// Held less than HoldAtLeast: keep it that much longer (an extend
		// never shortens a lease) and let it expire then; the lock delay
		// the hold asked for keeps the gateway from releasing it when the
		// stream closes.
		let = func() error {
			// Whole milliseconds, rounded up: the gateway takes ttl_ms, and
			// a truncated one would end the lease up to 1 ms too soon.
			left = (left + time.Millisecond - 1).Truncate(time.Millisecond)
			_, err := k.extend(rctx, kept.Key, kept.Token, max(left, 10*time.Millisecond))
			return err
		}
	}
	if err := let(); err != nil {
		if errors.Is(err, ErrNotHeld) || errors.Is(err, ErrTokenMismatch) {
			// Lost between the stream's last word and the end of fn.
			err = fmt.Errorf("%w: the %s was no longer held when fn returned: %w", ErrLockLost, k.noun, err)
		} else {
			err = fmt.Errorf("client: %s %s after fn: %w", k.releaseOp, kept.Key, err)
		}
		return errors.Join(fnErr, err)
	}
	return fnErr
}

// holdStream is a hold's stream after its acquired event.
type holdStream struct {
	body   io.ReadCloser
	cancel context.CancelFunc // ends the request
	// events delivers what the stream says after acquired; the last one
	// carries the error that ended the stream.
	events chan holdEvent
	closed chan struct{}
	once   sync.Once
}

// holdEvent is one Server-Sent Event of a hold's stream.
type holdEvent struct {
	name string
	data []byte
	at   time.Time // when it arrived
	err  error     // the stream ended: io.ErrUnexpectedEOF, or the read's error
}

// acceptEventStream asks for the stream that makes a PUT a hold.
func acceptEventStream(_ context.Context, req *http.Request) error {
	req.Header.Set("Accept", "text/event-stream")
	return nil
}

// openHold sends k's hold request for token and reads its stream up to the
// acquired event: the grant, and the stream to watch.
func openHold[G any](ctx context.Context, k holdKind[G], token string, wait, lockDelay time.Duration) (G, *holdStream, error) {
	var none G
	// The request must outlive ctx: fn's end, not the caller's, ends a
	// hold (Hold releases after fn returns, as it did when the caller
	// cancelled). Until the grant, ctx and a deadline (callTimeout past
	// the wait, as for any call) end it.
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopOnCtx := context.AfterFunc(ctx, cancel)
	deadline := time.AfterFunc(wait+callTimeout, cancel)
	detach := func() bool { // false when ctx or the deadline ended the request
		t, c := deadline.Stop(), stopOnCtx()
		return t && c
	}
	fail := func(err error) (G, *holdStream, error) {
		detach()
		cancel()
		return none, nil, err
	}
	sent := time.Now()
	resp, err := k.open(rctx, token, wait, lockDelay)
	if err != nil {
		return fail(transportError(ctx, "acquire", k.key, err))
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return fail(responseError(resp, b))
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		// A gateway that does not hold through streams (one older than
		// holds) granted a plain lease that nobody would renew: give it
		// back rather than run fn on a lease that just runs out.
		resp.Body.Close()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
		defer rcancel()
		_ = k.release(rctx, k.key, token)
		return fail(fmt.Errorf("client: acquire %s: the gateway answered %d with %q, not an event stream: it cannot hold a lease through a stream (the lease was released)",
			k.key, resp.StatusCode, mt))
	}
	events := newEventReader(resp.Body)
	ev, err := events.next()
	detached := detach()
	if err != nil || !detached {
		resp.Body.Close()
		cancel()
		switch {
		case ctx.Err() != nil:
			return none, nil, fmt.Errorf("client: acquire %s: %w", k.key, context.Cause(ctx))
		case err == nil:
			err = fmt.Errorf("no acquired event within %v", wait+callTimeout)
		}
		return none, nil, fmt.Errorf("client: acquire %s: %w: the stream ended before its acquired event: %w", k.key, ErrUnavailable, err)
	}
	st := &holdStream{body: resp.Body, cancel: cancel, events: make(chan holdEvent), closed: make(chan struct{})}
	if ev.name != "acquired" {
		st.close()
		return none, nil, fmt.Errorf("client: acquire %s: the hold's stream began with %q, not acquired", k.key, ev.name)
	}
	g, err := k.grant(ev.data, sent)
	if err != nil {
		st.close()
		return none, nil, fmt.Errorf("client: acquire %s: %w", k.key, err)
	}
	go st.read(events)
	return g, st, nil
}

// read sends the stream's events on st.events until the stream ends or st
// is closed.
func (st *holdStream) read(events *eventReader) {
	for {
		ev, err := events.next()
		ev.err = err
		select {
		case st.events <- ev:
		case <-st.closed:
			return
		}
		if err != nil {
			return
		}
	}
}

// close ends the stream, which releases the lease unless it was released
// or lost already (or, with a lock delay, leaves it to expire).
func (st *holdStream) close() {
	st.once.Do(func() {
		close(st.closed)
		st.cancel()
		st.body.Close()
	})
}

// keep watches a hold's stream while fn runs, until stop is closed or ctx
// ends. When the lease is lost it cancels ctx with the reason and returns
// it.
func keep(ctx context.Context, lease *Lease, st *holdStream, stop <-chan struct{}, lose context.CancelCauseFunc) error {
	// The gateway says lost before the lease's end. This deadline is for
	// a stream that says nothing: a gateway or a network gone silent.
	deadline := lease.deadline
	expiry := time.NewTimer(time.Until(deadline))
	defer expiry.Stop()
	fail := func(err error) error {
		lose(err)
		return err
	}
	for {
		select { // stop first: fn has returned, the lease is not lost
		case <-stop:
			return nil
		default:
		}
		select {
		case <-stop:
			return nil
		case <-ctx.Done():
			return nil
		case <-expiry.C:
			return fail(fmt.Errorf("%w: %s: %w: no renewal was heard before the lease's end", ErrLockLost, lease.Key, ErrUnavailable))
		case ev := <-st.events:
			if ev.err != nil {
				return fail(fmt.Errorf("%w: %s: %w: the hold's stream broke: %w", ErrLockLost, lease.Key, ErrUnavailable, ev.err))
			}
			switch ev.name {
			case "renewed":
				if d, ok := renewedDeadline(lease, ev); ok && d.After(deadline) {
					deadline = d
					expiry.Reset(time.Until(deadline))
				}
			case "released", "ended", "lost":
				return fail(holdEndError(lease.Key, ev))
			}
		}
	}
}

// renewedDeadline is when the lease a renewed event tells of ends, by this
// process's monotonic clock.
//
// The lease's end moved on by as much as the gateway's expires_at did
// since the grant; counted from the grant's deadline (sent+TTL, or
// expires_at on this host's clock if that came first), it needs no
// agreement between this host's clock and the gateway's. The event's
// arrival plus the TTL caps it: that is later than the real end (the
// renewal was made before the event arrived), so a gateway clock that
// jumped forward cannot carry the deadline past it.
func renewedDeadline(grant *Lease, ev holdEvent) (time.Time, bool) {
	var b struct {
		TTLms     int64     `json:"ttl_ms"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if json.Unmarshal(ev.data, &b) != nil || b.ExpiresAt.IsZero() || b.TTLms <= 0 {
		return time.Time{}, false
	}
	d := grant.deadline.Add(b.ExpiresAt.Sub(grant.ExpiresAt))
	if limit := ev.at.Add(time.Duration(b.TTLms) * time.Millisecond); d.After(limit) {
		d = limit
	}
	return d, true
}

// holdEndError is the ErrLockLost a hold's final event (released, ended,
// lost) means while fn runs, wrapping the error its reason matches.
func holdEndError(key string, ev holdEvent) error {
	var b struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(ev.data, &b)
	var why error
	switch b.Reason {
	case "expired", "released": // released: a DELETE with the token, from anywhere
		why = ErrNotHeld
	case "taken":
		why = ErrTokenMismatch
	case "backend-unavailable", "shutdown":
		why = ErrUnavailable
	}
	if why == nil { // max-hold, or a reason this client does not know
		return fmt.Errorf("%w: %s: the hold's stream says %s (%s)", ErrLockLost, key, ev.name, b.Reason)
	}
	return fmt.Errorf("%w: %s: the hold's stream says %s (%s): %w", ErrLockLost, key, ev.name, b.Reason, why)
}

// eventReader reads Server-Sent Events.
type eventReader struct{ sc *bufio.Scanner }

func newEventReader(r io.Reader) *eventReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	return &eventReader{sc}
}

// next returns the next event, skipping comments (heartbeats); at the end
// of the stream, io.ErrUnexpectedEOF (a hold's stream never ends but after
// a final event) or the read's error.
func (r *eventReader) next() (holdEvent, error) {
	var (
		ev   holdEvent
		data []string
	)
	for r.sc.Scan() {
		line := r.sc.Text()
		if line == "" {
			if ev.name != "" {
				ev.data, ev.at = []byte(strings.Join(data, "\n")), time.Now()
				return ev, nil
			}
			data = nil
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field { // "" is a comment; id and retry mean nothing to a hold
		case "event":
			ev.name = value
		case "data":
			data = append(data, value)
		}
	}
	if err := r.sc.Err(); err != nil {
		return holdEvent{}, err
	}
	return holdEvent{}, io.ErrUnexpectedEOF
}

// optionalMillis is d as an optional milliseconds field: nil for 0.
func optionalMillis(d time.Duration) *int64 {
	if d <= 0 {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}
