package handlers

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/problem"
)

// refusedWaiterRetry is the Retry-After of a too-many-waiters refusal.
const refusedWaiterRetry = 5 * time.Second

// Waits bounds the acquires that wait at once, of locks and permits
// together (those with a wait), and refuses the others at once with
// problem.TooManyWaiters. A waiting acquire holds a connection, two
// goroutines, and with Redis a place in the key's queue (its gateway's one
// heartbeat a second keeps them all): about 28 KiB each. 3 000 of them
// past a small memory limit made every other request seven times dearer
// (issue 13). An acquire that does not wait is never refused here.
//
// With a tracer, each wait is a span of its own ("lock wait", "permit
// wait"), whose children are the backend calls of its tries.
type Waits struct {
	slots   chan struct{}
	refuse  *Error
	refused func() // counts a refusal
	tracer  trace.Tracer
}

// NewWaits lets max acquires wait at once; refused (may be nil) hears each
// refusal, tracer (may be nil) traces the waits.
func NewWaits(max int, refused func(), tracer trace.Tracer) *Waits {
	if refused == nil {
		refused = func() {}
	}
	return &Waits{
		slots:   make(chan struct{}, max),
		refused: refused,
		tracer:  tracer,
		refuse: &Error{
			Kind: problem.TooManyWaiters,
			Detail: fmt.Sprintf("the gateway has %d acquires waiting, its limit (LOCKGW_MAX_WAITING); "+
				"retry later, or without waiting", max),
			// The places free up as waits end, which take up to
			// LOCKGW_MAX_WAIT: a client told to come back in a second
			// would mostly find them taken again.
			RetryAfter: refusedWaiterRetry,
		},
	}
}

// Waiting is how many acquires are waiting.
func (w *Waits) Waiting() int { return len(w.slots) }

// enter takes a place to wait, or refuses; leave gives it back. A nil
// Waits bounds nothing.
func (w *Waits) enter() (leave func(), err error) {
	if w == nil {
		return func() {}, nil
	}
	select {
	case w.slots <- struct{}{}:
		return func() { <-w.slots }, nil
	default:
		w.refused()
		return nil, w.refuse
	}
}

// acquireWaiting runs call, a store's acquire of a lock or a permit (what
// names its span) that waits up to wait, under the backend timeout on top
// of the wait: every waiting acquire of the gateway passes here, so that
// what bounds, traces and ends a wait is in one place. The wait ends early
// when the client goes away or the server shuts down.
func acquireWaiting[G any](ctx context.Context, h *Locks, what string, wait time.Duration, call func(ctx context.Context) (G, error)) (G, error) {
	var none G
	if wait > 0 {
		leave, err := h.limits.Waits.enter()
		if err != nil {
			return none, err
		}
		defer leave()
	}
	ctx, cancel := context.WithTimeoutCause(ctx, wait+h.limits.BackendTimeout, lockstore.ErrUnavailable)
	defer cancel()
	if wait <= 0 { // one store call, bounded by the backend timeout
		return call(ctx)
	}
	// The shutdown ends the wait through the timeout's own cancel, and
	// shut says it did (unless the wait had ended already): a context of
	// its own for that cost each waiter some 300 bytes (issue 17).
	var shut atomic.Bool
	defer context.AfterFunc(h.shutdown, func() {
		if ctx.Err() == nil {
			shut.Store(true)
		}
		cancel()
	})()
	var tracer trace.Tracer
	if h.limits.Waits != nil {
		tracer = h.limits.Waits.tracer
	}
	waitCtx, span := startWait(ctx, tracer, what, wait)
	got, err := call(waitCtx)
	endWait(span, err)
	if err != nil && shut.Load() {
		return none, errShuttingDown
	}
	return got, err
}

// startWait starts the span of an acquire that may wait (for a lock or a
// permit): from its first try to its answer, so that the backend calls it
// makes, the first try and those after each wake-up, are its children.
// nil when tracing is off or the request is not traced.
func startWait(ctx context.Context, t trace.Tracer, name string, wait time.Duration) (context.Context, trace.Span) {
	if t == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, nil
	}
	return t.Start(ctx, name, trace.WithAttributes(attribute.Int64("lockgw.wait.max_ms", wait.Milliseconds())))
}

// endWait ends a wait's span with how it ended: granted, held (the wait
// ran out), abandoned (the client left), or failed.
func endWait(span trace.Span, err error) {
	if span == nil {
		return
	}
	outcome := "granted"
	switch {
	case err == nil:
	case errors.Is(err, lockstore.ErrHeld), errors.Is(err, lockstore.ErrSemaphoreFull):
		outcome = "timed_out"
	case errors.Is(err, context.Canceled):
		outcome = "abandoned"
	default:
		outcome = "failed"
		span.SetStatus(codes.Error, "the wait ended without an answer from the backend")
	}
	span.SetAttributes(attribute.String("lockgw.wait.outcome", outcome))
	span.End()
}
