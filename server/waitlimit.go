package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/lockgateway/lockgateway/handlers"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/problem"
)

// refusedWaiterRetry is the Retry-After of a too-many-waiters refusal.
const refusedWaiterRetry = 5 * time.Second

// waitLimit is the store the handlers see: it lets at most max acquires
// wait at once (those with AcquireRequest.Wait > 0), and refuses the others
// at once with problem.TooManyWaiters. A waiting acquire holds a connection,
// two goroutines, and with Redis a place in the key's queue (its gateway's
// one heartbeat a second keeps them all): about 28 KiB each. 3 000 of them past a
// small memory limit made every other request seven times dearer (issue
// 13). An acquire that does not wait is never refused here.
type waitLimit struct {
	lockstore.Store
	// sems is the store's semaphores (nil when it has none): a waiting
	// permit acquire takes a place like a lock's.
	sems    lockstore.Semaphores
	forcer  lockstore.Forcer // the store's forced releases (nil when it has none)
	slots   chan struct{}
	refuse  *handlers.Error
	refused func()       // counts a refusal
	tracer  trace.Tracer // nil with tracing off
}

func newWaitLimit(store lockstore.Store, max int, refused func()) waitLimit {
	sems, _ := store.(lockstore.Semaphores)
	forcer, _ := store.(lockstore.Forcer)
	return waitLimit{
		Store:   store,
		sems:    sems,
		forcer:  forcer,
		refused: refused,
		slots:   make(chan struct{}, max),
		refuse: &handlers.Error{
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

// Acquire waits only with a slot free.
func (s waitLimit) Acquire(ctx context.Context, key string, req lockstore.AcquireRequest) (lockstore.Lease, error) {
	if req.Wait <= 0 {
		return s.Store.Acquire(ctx, key, req)
	}
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		s.refused()
		return lockstore.Lease{}, s.refuse
	}
	ctx, span := startWait(ctx, s.tracer, "lock wait", req.Wait)
	l, err := s.Store.Acquire(ctx, key, req)
	endWait(span, err)
	return l, err
}

// Waiting is how many acquires are waiting.
func (s waitLimit) Waiting() int { return len(s.slots) }

// SemAcquire waits only with a slot free, as Acquire; the rest of
// lockstore.Semaphores goes to the store.
func (s waitLimit) SemAcquire(ctx context.Context, key string, req lockstore.PermitRequest) (lockstore.Permit, error) {
	if req.Wait <= 0 {
		return s.sems.SemAcquire(ctx, key, req)
	}
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		s.refused()
		return lockstore.Permit{}, s.refuse
	}
	ctx, span := startWait(ctx, s.tracer, "permit wait", req.Wait)
	p, err := s.sems.SemAcquire(ctx, key, req)
	endWait(span, err)
	return p, err
}

func (s waitLimit) SemExtend(ctx context.Context, key, token string, ttl time.Duration) (lockstore.Permit, error) {
	return s.sems.SemExtend(ctx, key, token, ttl)
}

func (s waitLimit) SemRelease(ctx context.Context, key, token string) error {
	return s.sems.SemRelease(ctx, key, token)
}

func (s waitLimit) SemInspect(ctx context.Context, key string) (lockstore.SemaphoreState, error) {
	return s.sems.SemInspect(ctx, key)
}

// The handlers get a waitLimit value, so its methods take values too: with
// a pointer receiver, ExtendBatch was no method of what they held, and
// holds' renewals went out one script each (make bench, row 13).
var _ lockstore.BatchExtender = waitLimit{}

// ExtendBatch passes holds' batched renewals through to the store
// (lockstore.ExtendAll): a renewal never waits, so the wait limit has
// nothing to count.
func (s waitLimit) ExtendBatch(ctx context.Context, exts []lockstore.Extension) []lockstore.Extended {
	return lockstore.ExtendAll(ctx, s.Store, exts)
}

var _ lockstore.BatchSemExtender = waitLimit{}

// SemExtendBatch is ExtendBatch for holds of permits.
func (s waitLimit) SemExtendBatch(ctx context.Context, exts []lockstore.Extension) []lockstore.SemExtended {
	return lockstore.SemExtendAll(ctx, s.sems, exts)
}

var _ lockstore.Forcer = waitLimit{}

// errNoForce: the store cannot release by force (every backend can).
var errNoForce = errors.New("server: the store cannot release by force")

// ForceRelease passes a forced release through to the store: it never
// waits.
func (s waitLimit) ForceRelease(ctx context.Context, key string, fence int64) (lockstore.Lease, error) {
	if s.forcer == nil {
		return lockstore.Lease{}, errNoForce
	}
	return s.forcer.ForceRelease(ctx, key, fence)
}

// SemForceRelease passes a permit's forced release through to the store.
func (s waitLimit) SemForceRelease(ctx context.Context, key string, fence int64) (lockstore.Permit, error) {
	if s.forcer == nil {
		return lockstore.Permit{}, errNoForce
	}
	return s.forcer.SemForceRelease(ctx, key, fence)
}
