package redis

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/lockgateway/lockgateway/internal/aside"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/lockgateway/lockgateway/lockstore/internal/wait"
)

// How a Redis waiter stays in its key's queue: its gateway refreshes one
// heartbeat per key for all its waiters at least every waitRefresh
// (wait_room.go), and the tickets of a gateway not refreshed for
// waitHeartbeat (it died) are dropped when they come first.
const (
	waitHeartbeat = 3 * time.Second
	waitRefresh   = time.Second
)

// acquireInLine is an acquire that may wait in key's line: a first try, and when the
// key is held, queueing the caller for key and taking the lock when it is
// the caller's turn (wait.For, wait.Told): woken by the release, grant or
// leave that makes it first (pub/sub names its ticket), by the holder's
// expiry (the first waiter sleeps until then), or by its gateway's
// heartbeat when a notification was lost. Between those it runs no script
// at all.
//
// Its goroutine (the request's) only sleeps: the tries, and the Redis
// calls that queue the caller, run aside (internal/aside) on the wait's state,
// which is on the heap, so that the stack it parks with stays small.
func (s *Store) acquireInLine(ctx context.Context, key string, req *lockstore.AcquireRequest) (lockstore.Lease, error) {
	q := &waiting{s: s, ctx: ctx, key: key, req: req}
	defer q.leave()
	if done := aside.Run(q.first); done {
		return q.lease, q.err
	}
	if err := wait.For(ctx, q.deadline, q.wake, wait.Told, q.tryAside); err != nil {
		return lockstore.Lease{}, err
	}
	return q.lease, q.err
}

// waiting is one waiting acquire.
type waiting struct {
	s   *Store
	ctx context.Context
	key string
	req *lockstore.AcquireRequest
	a   script.AcquireArgs

	deadline time.Time
	wake     chan struct{} // buffered; set once the caller listens
	r        *room
	w        *roomWaiter
	granted  bool

	lease lockstore.Lease // the last try's answer
	err   error
	// queued is first's try, when it queued the caller already: wait.For's
	// first try, not sent again.
	queued *wait.Try
	// told is the length, ms, of the lease granted when the caller became
	// the first waiter, as the grant's message said (0: none since the
	// last try; script.Turn).
	told atomic.Int64
}

// first tries once, and when the key is held, listens and joins the
// key's room; done: its answer is final. The try queues the caller only
// when the key's channel is listened to already.
func (q *waiting) first() (done bool) {
	s, key := q.s, q.key
	a, start, err := s.prepare(q.ctx, key, q.req)
	if err != nil {
		q.err = err
		return true
	}
	q.a = a
	q.deadline = start.Add(q.req.Wait)
	if s.rooms.waiting(key) {
		// Others of this gateway wait for the key: its channel is
		// listened to already, so listening costs no round trip, and the
		// first try can queue the caller at once: one script where a try
		// and then a queued try were two. Its answer is final unless
		// the key is busy, as a first try's is.
		if q.err = q.line(); q.err != nil {
			return true
		}
		t := q.try()
		if t.Answer != wait.Busy {
			return true
		}
		q.queued = &t
		return false
	}
	r, err := s.acquire(q.ctx, key, &q.a)
	switch {
	case err != nil:
		q.err = err
		return true
	case r.Code == script.AcquireOverQuota:
		q.err = r.CapErr
		return true
	case r.Code != script.AcquireHeld:
		q.lease = r.Lease(key, q.req.Token, q.req.TTL, start)
		return true
	}
	if q.err = q.line(); q.err != nil {
		return true
	}
	return false
}

// line gives the caller a ticket, listens for its turn and joins key's
// room. Listen before queueing, so a release between the two is not
// missed.
func (q *waiting) line() error {
	q.a.Ticket = script.WaitTicket{Id: q.s.rooms.ticket(), Heartbeat: waitHeartbeat}
	wake := make(chan struct{}, 1)
	if err := q.s.notifier.ListenTold(q.ctx, script.Channel(q.key), q.a.Ticket.Id, wake, &q.told, q.a.Digest); err != nil {
		return err
	}
	q.wake = wake
	q.r, q.w = q.s.join(q.key, q.a.Ticket.Id, wake)
	return nil
}

func (q *waiting) tryAside() wait.Try {
	if t := q.queued; t != nil {
		q.queued = nil
		// A release may have promised this waiter's try to its pipeline
		// since first's try (handoff.go): free it, rather than let it wait
		// out pairWait; its poke makes the next try at once.
		q.r.dropPair(q.w)
		return *t
	}
	if ms := q.told.Swap(0); ms > 0 && q.r.toldFirst(q.w) {
		// Woken as the first waiter by the grant that made it so, which
		// said how long that lease is: nothing to learn from a try. Sleep
		// until it runs out (its holder may die), a release says the key
		// is free, or a release of this gateway sends its try along.
		left := time.Duration(ms) * time.Millisecond
		q.err = &lockstore.HeldError{Remaining: left}
		return wait.Queued(true, left)
	}
	return aside.Run(q.try)
}

// try runs acquire.lua with the caller's ticket.
func (q *waiting) try() wait.Try {
	attempt := q.s.now()
	ctx := q.ctx
	if p := q.r.trying(q.w); p != nil { // sent behind a release of this gateway (handoff.go)
		ctx = script.WithPair(ctx, p, false)
		defer p.Cancel()
	}
	res, err := q.s.acquire(ctx, q.key, &q.a)
	q.r.tried(q.w, err == nil && res.Code == script.AcquireHeld, res.Head)
	q.lease, q.err = lockstore.Lease{}, err
	switch {
	case err != nil:
		return wait.Try{Answer: noAnswer(err)}
	case res.Code == script.AcquireOverQuota: // the key was ours to take: leave makes way
		q.err = res.CapErr
		return wait.Try{Answer: wait.Done}
	case res.Code == script.AcquireNew || res.Code == script.AcquireRenewed:
		q.granted = true
		q.lease = res.Lease(q.key, q.req.Token, q.req.TTL, attempt)
		return wait.Try{Answer: wait.Done}
	}
	q.err = &lockstore.HeldError{Remaining: res.Remaining}
	if res.NoExpiry { // a first waiter woken at Remaining (0) would try every millisecond
		return wait.Queued(false, 0)
	}
	return wait.Queued(res.Head, res.Remaining)
}

// noAnswer classifies a try's error for wait.For: a call that got no
// answer is tried again, same token and ticket, until the wait runs out;
// a Redis that refuses writes ends the wait, as any other error does.
func noAnswer(err error) wait.Answer {
	if errors.Is(err, lockstore.ErrUnavailable) && !errors.Is(err, lockstore.ErrRefused) {
		return wait.NoAnswer
	}
	return wait.Done
}

// leave undoes first's listening and joining, if it got that far, when
// the wait ends.
func (q *waiting) leave() {
	if q.wake == nil {
		return
	}
	id := q.a.Ticket.Id
	if q.r != nil {
		q.s.part(q.r, q.w) // first, so the heartbeat does not take the leave for a lost queue
		if !q.granted {
			q.s.leave(q.ctx, q.key, id)
		}
	}
	q.s.notifier.Stop(script.Channel(q.key), id)
}

// leave takes a waiter out of the queue with a context of its own: the
// request's may be why the wait ended. If it fails, the heartbeat drops the
// entry within waitHeartbeat.
func (s *Store) leave(req context.Context, key, id string) {
	leaveBy(req, func(ctx context.Context) { _ = script.Leave(ctx, s.client, key, id, s.publish) })
}

// leaveBy runs a waiter's leave (call), with a second for it, before its
// caller answers: a caller who did not wait then finds the line as the
// waiter left it. But never past the request's deadline (req's), which an
// answer must not pass (http-api.md): with Redis unreachable, that second
// kept a 503 past it (found by review). Cut short by the deadline, the
// leave is sent again after the answer (it is idempotent).
func leaveBy(req context.Context, call func(context.Context)) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req), time.Second)
	d, ok := req.Deadline()
	if !ok || errors.Is(req.Err(), context.Canceled) { // nobody waits for the answer
		defer cancel()
		call(ctx)
		return
	}
	before, stop := context.WithDeadline(ctx, d)
	call(before)
	late := before.Err() != nil && ctx.Err() == nil
	stop()
	if !late {
		cancel()
		return
	}
	go func() {
		defer cancel()
		call(ctx)
	}()
}
