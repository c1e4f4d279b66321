package lockstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// How a Redis waiter stays in its key's queue: it refreshes its heartbeat
// at least every waitRefresh, and a waiter not refreshed for waitHeartbeat
// (its gateway died) is dropped by the next acquire on the key. The refresh
// is also the safety net for a lost notification: it is the only polling a
// waiter does, about once a second.
const (
	waitHeartbeat = 3 * time.Second
	waitRefresh   = time.Second
)

// wait queues the caller for key and takes the lock when it is the
// caller's turn: woken by the release that frees it (pub/sub, only the first
// waiter is told), by the holder's expiry (the first waiter sleeps until
// then), or by its own heartbeat refresh.
func (s *Redis) wait(ctx context.Context, key string, a acquireArgs, req AcquireRequest, start time.Time) (Lease, error) {
	deadline := start.Add(req.Wait)
	ticket := waitTicket{id: NewToken(), heartbeat: waitHeartbeat}
	a.ticket = ticket

	// Listen before queueing, so a release between the two is not missed.
	wake := make(chan struct{}, 1)
	if err := s.notifier.listen(ctx, channel(key), ticket.id, wake); err != nil {
		return Lease{}, err
	}
	defer s.notifier.stop(channel(key), ticket.id)

	granted := false
	defer func() {
		if !granted {
			s.leave(key, ticket.id)
		}
	}()

	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		attempt := time.Now()
		r, err := s.acquire(ctx, key, &a)
		if err != nil {
			return Lease{}, err
		}
		switch r.code {
		case acquireOverQuota: // the key was ours to take: leave makes way
			return Lease{}, r.capErr
		case acquireNew, acquireRenewed:
			granted = true
			return r.lease(key, req.Token, req.TTL, attempt), nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return Lease{}, &HeldError{Remaining: r.remaining}
		}
		// Sleep until the next refresh, a little jittered so the waiters
		// of many gateways spread out; the first waiter wakes when the
		// holder's lease runs out, in case the holder died.
		sleep := waitRefresh - rand.N(waitRefresh/4)
		if r.head && r.remaining > 0 {
			sleep = min(sleep, r.remaining+time.Millisecond)
		}
		timer.Reset(min(sleep, left))
		select {
		case <-wake:
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		case <-ctx.Done():
			return Lease{}, ctx.Err()
		}
	}
}

// leave takes a waiter out of the queue with a context of its own: the
// request's may be why the wait ended. If it fails, the heartbeat drops the
// entry within waitHeartbeat.
func (s *Redis) leave(key, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = leaveScript.Run(ctx, s.client, []string{lockKey(key), queueKey(key), aliveKey(key)}, id, channel(key)).Err()
}

// notifier shares one pub/sub connection among all the waiters of a Redis
// store and hands each message to the waiter it names. Subscriptions are
// per key, made by the first waiter on the key and dropped by the last.
type notifier struct {
	client redis.UniversalClient

	subMu sync.Mutex // serializes SUBSCRIBE/UNSUBSCRIBE with the map changes
	mu    sync.Mutex // guards ps and waiters, also for the dispatcher
	ps    *redis.PubSub
	// waiters: channel → waiter id → its wake-up (buffered, never blocks).
	waiters map[string]map[string]chan struct{}
}

func newNotifier(client redis.UniversalClient) *notifier {
	return &notifier{client: client, waiters: make(map[string]map[string]chan struct{})}
}

// listen makes wake (buffered) receive when a message on ch names id, or
// is "*": a release with nobody queued, for waiters without a queue.
func (n *notifier) listen(ctx context.Context, ch, id string, wake chan struct{}) error {
	n.subMu.Lock()
	defer n.subMu.Unlock()
	n.mu.Lock()
	if n.ps == nil {
		// The dispatcher runs for the store's lifetime, one per store.
		n.ps = n.client.Subscribe(context.Background())
		go n.dispatch(n.ps)
	}
	ws, subscribed := n.waiters[ch]
	if !subscribed {
		ws = make(map[string]chan struct{})
		n.waiters[ch] = ws
	}
	ws[id] = wake
	ps := n.ps
	n.mu.Unlock()

	if !subscribed {
		if err := ps.Subscribe(ctx, ch); err != nil {
			n.mu.Lock()
			delete(n.waiters, ch)
			n.mu.Unlock()
			return redisErr(err)
		}
	}
	return nil
}

// stop forgets a waiter, unsubscribing from ch when it was the last.
func (n *notifier) stop(ch, id string) {
	n.subMu.Lock()
	defer n.subMu.Unlock()
	n.mu.Lock()
	ws := n.waiters[ch]
	delete(ws, id)
	last := len(ws) == 0
	if last {
		delete(n.waiters, ch)
	}
	ps := n.ps
	n.mu.Unlock()
	if last && ps != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = ps.Unsubscribe(ctx, ch)
	}
}

func (n *notifier) dispatch(ps *redis.PubSub) {
	for msg := range ps.Channel() {
		n.mu.Lock()
		for id, wake := range n.waiters[msg.Channel] {
			if msg.Payload == "*" || msg.Payload == id {
				select {
				case wake <- struct{}{}:
				default: // already woken
				}
			}
		}
		n.mu.Unlock()
	}
}

func (n *notifier) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ps != nil {
		_ = n.ps.Close()
	}
}

// retryUntil is waiting for stores without a queue (Redlock): try, and
// while the key is held, try again when wake says a release happened (after
// a few random milliseconds, so the waiters of many gateways do not all
// arrive at once), else after an exponential backoff with full jitter, and
// never later than the holder's lease runs out. A try that finds the store
// unavailable in the middle of the wait is tried again in the same way:
// the wait ends when it runs out (with the last answer), when a try is
// decisive, or when ctx ends.
func retryUntil(ctx context.Context, req AcquireRequest, wake <-chan struct{}, try func() (Lease, error)) (Lease, error) {
	deadline := time.Now().Add(req.Wait)
	backoff := 10 * time.Millisecond
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		lease, err := try()
		left := time.Until(deadline)
		next := left
		if held, ok := errors.AsType[*HeldError](err); ok {
			next = held.Remaining + time.Millisecond
		} else if !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			return lease, err
		}
		if left <= 0 {
			return lease, err
		}
		timer.Reset(max(min(rand.N(backoff)+time.Millisecond, next, left), time.Millisecond))
		select {
		case <-ctx.Done():
			return Lease{}, ctx.Err()
		case <-wake:
			if !timer.Stop() {
				<-timer.C
			}
			timer.Reset(rand.N(5 * time.Millisecond))
			<-timer.C
		case <-timer.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}
