package redis

import "github.com/lockgateway/lockgateway/lockstore/internal/script"

// handoff is the local handoff of a release of key (docs/safety.md, "A
// waiter's try sent with the release"): when the oldest of this gateway's
// waiters for key was last told it is first in the key's queue, and rests
// (no try of its own on the wire), it is woken now, and its try rides in
// the release's pipeline, right behind it (script.Pair), instead of
// waiting for the release's message. nil: no such waiter, or a store whose
// tries do not go through its batch (a Cluster; with replicas to wait for,
// a grant and its WAIT share a connection of their own), where the message
// wakes it as before.
//
// The release's calls go with script.WithPair(ctx, p, true), and it
// Cancels p when done, so that a try still to come does not wait for it.
func (s *Store) handoff(key string) *script.Pair {
	if s.batch == nil || s.acks.replicas > 0 {
		return nil
	}
	var p *script.Pair
	s.oldest(key, func(w *roomWaiter) {
		if w.resting() {
			w.pair = &script.Pair{}
			poke(w.wake)
			p = w.pair
		}
	})
	return p
}

// resting: w's last try found it first in the queue, and it runs no try
// now and has none promised to a release. Called with its room's mu held.
func (w *roomWaiter) resting() bool {
	return !w.busy && w.queued && w.head && w.pair == nil
}

// oldest calls f, under the room's lock, with the oldest of this gateway's
// waiters for the lock key, if any.
func (s *Store) oldest(key string, f func(w *roomWaiter)) {
	s.rooms.mu.Lock()
	r := s.rooms.byKey[roomID(key, false)]
	s.rooms.mu.Unlock()
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.order.Front(); e != nil {
		f(e.Value.(*roomWaiter))
	}
}
