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
	s.rooms.mu.Lock()
	r := s.rooms.byKey[roomID(key, false)]
	s.rooms.mu.Unlock()
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.order.Front()
	if e == nil {
		return nil
	}
	w := e.Value.(*roomWaiter)
	if w.busy || !w.queued || !w.head || w.pair != nil {
		return nil
	}
	w.pair = &script.Pair{}
	poke(w.wake)
	return w.pair
}
