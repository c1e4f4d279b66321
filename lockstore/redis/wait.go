package redis

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/lockgateway/lockgateway/internal/aside"
	"github.com/lockgateway/lockgateway/internal/sleep"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

// How a Redis waiter stays in its key's queue: its gateway refreshes one
// heartbeat per key for all its waiters at least every waitRefresh
// (wait_room.go), and the tickets of a gateway not refreshed for
// waitHeartbeat (it died) are dropped when they come first.
const (
	waitHeartbeat = 3 * time.Second
	waitRefresh   = time.Second
)

// acquireWaiting is an acquire that may wait: a first try, and when the
// key is held, queueing the caller for key and taking the lock when it is
// the caller's turn: woken by the release, grant or leave that makes it
// first (pub/sub names its ticket), by the holder's expiry (the first
// waiter sleeps until then), or by its gateway's heartbeat when a
// notification was lost. Between those it runs no script at all.
//
// Its goroutine (the request's) only sleeps: the tries, and the Redis
// calls that queue the caller, run aside (internal/aside) on the wait's state,
// which is on the heap, so that the stack it parks with stays small.
func (s *Store) acquireWaiting(ctx context.Context, key string, req *lockstore.AcquireRequest) (lockstore.Lease, error) {
	q := &waiting{s: s, ctx: ctx, key: key, req: req}
	defer q.leave()
	p := aside.Run(q.first)
	for !p.done {
		if p.told {
			if _, ok := sleep.Until(ctx, p.d, q.wake); !ok {
				return lockstore.Lease{}, ctx.Err()
			}
		} else if !sleep.For(ctx, p.d) {
			return lockstore.Lease{}, ctx.Err()
		}
		p = aside.Run(q.try)
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
	backoff  time.Duration
	granted  bool

	lease lockstore.Lease // the outcome
	err   error
}

// pause is what a waiter does after a try: done (the outcome is in
// waiting), or sleep d, until told (told) or not (a backoff).
type pause struct {
	done bool
	told bool
	d    time.Duration
}

func (q *waiting) end(l lockstore.Lease, err error) pause {
	q.lease, q.err = l, err
	return pause{done: true}
}

// first tries once without queueing, and when the key is held, listens,
// joins the key's room and tries with a ticket.
func (q *waiting) first() pause {
	s, key := q.s, q.key
	a, start, err := s.prepare(q.ctx, key, q.req)
	if err != nil {
		return q.end(lockstore.Lease{}, err)
	}
	q.a = a
	r, err := s.acquire(q.ctx, key, &q.a)
	switch {
	case err != nil:
		return q.end(lockstore.Lease{}, err)
	case r.Code == script.AcquireOverQuota:
		return q.end(lockstore.Lease{}, r.CapErr)
	case r.Code != script.AcquireHeld:
		return q.end(r.Lease(key, q.req.Token, q.req.TTL, start), nil)
	}
	q.deadline = start.Add(q.req.Wait)
	q.a.Ticket = script.WaitTicket{Id: s.rooms.ticket(), Heartbeat: waitHeartbeat}
	// Listen before queueing, so a release between the two is not missed.
	wake := make(chan struct{}, 1)
	if err := s.notifier.Listen(q.ctx, script.Channel(key), q.a.Ticket.Id, wake); err != nil {
		return q.end(lockstore.Lease{}, err)
	}
	q.wake = wake
	q.r, q.w = s.join(key, q.a.Ticket.Id, wake)
	q.backoff = 10 * time.Millisecond
	return q.try()
}

// try runs acquire.lua with the caller's ticket.
func (q *waiting) try() pause {
	attempt := time.Now()
	q.r.trying(q.w)
	res, err := q.s.acquire(q.ctx, q.key, &q.a)
	q.r.tried(q.w, err == nil && res.Code == script.AcquireHeld)
	if err != nil {
		// A call that got no answer (a burst of thousands of waiters
		// joining at once, a Redis failing over) is tried again, with the
		// same token and ticket, until the wait runs out: a grant whose
		// answer was lost comes back as this token's renewal. A Redis that
		// refuses writes, or a context that ended, ends it.
		left := time.Until(q.deadline)
		if !errors.Is(err, lockstore.ErrUnavailable) || errors.Is(err, lockstore.ErrRefused) || q.ctx.Err() != nil || left <= 0 {
			return q.end(lockstore.Lease{}, err)
		}
		d := min(q.backoff/2+rand.N(q.backoff/2), left)
		q.backoff = min(2*q.backoff, waitRefresh)
		return pause{d: d}
	}
	q.backoff = 10 * time.Millisecond
	switch res.Code {
	case script.AcquireOverQuota: // the key was ours to take: leave makes way
		return q.end(lockstore.Lease{}, res.CapErr)
	case script.AcquireNew, script.AcquireRenewed:
		q.granted = true
		return q.end(res.Lease(q.key, q.req.Token, q.req.TTL, attempt), nil)
	}
	left := time.Until(q.deadline)
	if left <= 0 {
		return q.end(lockstore.Lease{}, &lockstore.HeldError{Remaining: res.Remaining})
	}
	// Sleep until told; the first waiter wakes when the holder's lease
	// runs out, in case the holder died.
	nap := left
	if res.Head && res.Remaining > 0 {
		nap = min(nap, res.Remaining+time.Millisecond)
	}
	return pause{told: true, d: nap}
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
			q.s.leave(q.key, id)
		}
	}
	q.s.notifier.Stop(script.Channel(q.key), id)
}

// leave takes a waiter out of the queue with a context of its own: the
// request's may be why the wait ended. If it fails, the heartbeat drops the
// entry within waitHeartbeat.
func (s *Store) leave(key, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = script.LeaveScript.Run(ctx, s.client, []string{script.LockKey(key), script.QueueKey(key), script.AliveKey(key)}, id, script.Channel(key), s.publish).Err()
}
