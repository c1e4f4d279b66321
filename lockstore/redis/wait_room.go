package redis

import (
	"container/list"
	"context"
	_ "embed"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/lockgateway/lockgateway/internal/randid"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

// A room is one gateway's waiters of one key. Their tickets sit in the
// key's queue in Redis, each "<gateway>.<id>", but the heartbeat that
// keeps them there is the gateway's, one script about once a second for
// all of them (heartbeat.lua): 10 000 waiters on one key cost what one
// does. A waiter sleeps until it is told it is first (the release or
// leave that made it so names its ticket; the grant before it too), and
// the heartbeat is the safety net for a notification that was lost: it
// says who is first, and wakes that waiter if it is ours and the lock is
// free. So only the first waiter ever runs acquire.lua while it waits.
//
// When the gateway dies, its heartbeat stops: after waitHeartbeat its
// tickets are dropped from the queue by the next script that finds one
// first, so they never hold up the line.
type room struct {
	key string
	// sem: a semaphore's room (sem_room.go), whose heartbeat is
	// sem_heartbeat.lua; rooms.byKey holds it under semQueueKey(key),
	// which no lock key can be (they have no braces).
	sem  bool
	mu   sync.Mutex
	byID map[string]*list.Element // ticket → its place in order
	// order is the local waiters by arrival; its front is the oldest,
	// whose presence in Redis's queue the heartbeat checks.
	order *list.List
}

// roomWaiter is one waiting request as its room sees it.
type roomWaiter struct {
	ticket string
	wake   chan struct{} // buffered: try to acquire now
	// What the heartbeat needs to tell a lost ticket from one that went
	// for a reason (granted, left, queued again): busy while acquire.lua
	// runs, queued when its last run left the ticket in the queue, tries
	// counting the runs done.
	busy, queued bool
	tries        int
	// head: its last try found it first in the queue. pair: a release
	// of this gateway sends its next try along (handoff.go), set until
	// that try takes it.
	head bool
	pair *script.Pair
}

// rooms is a Redis store's rooms, by key.
type rooms struct {
	gateway string // this store's id in tickets and heartbeats
	mu      sync.Mutex
	byKey   map[string]*room
}

func newRooms() *rooms {
	return &rooms{gateway: randid.New(12), byKey: make(map[string]*room)}
}

// ticket is a new ticket of this gateway. The "~" says that its waiter
// reads a grant's "you are first, for ms" (script.Turn): acquire.lua sends
// a ticket without it, of a gateway of an earlier version, the plain id.
func (rs *rooms) ticket() string { return rs.gateway + ".~" + randid.New(12) }

// id is r's key in rooms.byKey.
func (r *room) id() string { return roomID(r.key, r.sem) }

// waiting: callers of this gateway wait for the lock key, so its
// channel is listened to already.
func (rs *rooms) waiting(key string) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.byKey[roomID(key, false)] != nil
}

func roomID(key string, sem bool) string {
	if sem {
		return script.SemQueueKey(key)
	}
	return key
}

// join adds a waiter to key's room, starting the room's heartbeat when it
// is the first.
func (s *Store) join(key, ticket string, wake chan struct{}) (*room, *roomWaiter) {
	return s.enter(key, false, ticket, wake)
}

// enter is join for a lock's room or, sem true, a semaphore's.
func (s *Store) enter(key string, sem bool, ticket string, wake chan struct{}) (*room, *roomWaiter) {
	rs := s.rooms
	w := &roomWaiter{ticket: ticket, wake: wake}
	rs.mu.Lock()
	r := rs.byKey[roomID(key, sem)]
	start := r == nil
	if start {
		r = &room{key: key, sem: sem, byID: make(map[string]*list.Element), order: list.New()}
		rs.byKey[r.id()] = r
	}
	r.mu.Lock()
	r.byID[ticket] = r.order.PushBack(w)
	r.mu.Unlock()
	rs.mu.Unlock()
	if start {
		go s.heartbeat(r)
	}
	return r, w
}

// part takes a waiter out of r; the last one out closes it.
func (s *Store) part(r *room, w *roomWaiter) {
	rs := s.rooms
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r.mu.Lock()
	if e := r.byID[w.ticket]; e != nil {
		r.order.Remove(e)
		delete(r.byID, w.ticket)
	}
	w.withdraw() // a release may wait for a try that will not come
	empty := r.order.Len() == 0
	r.mu.Unlock()
	if empty && rs.byKey[r.id()] == r {
		delete(rs.byKey, r.id())
	}
}

// trying notes that w runs acquire.lua, and returns the pair of a
// release its try goes with (nil: none); tried notes that it did, leaving
// its ticket queued or not, first in the queue or not.
func (r *room) trying(w *roomWaiter) *script.Pair {
	r.mu.Lock()
	defer r.mu.Unlock()
	w.busy = true
	p := w.pair
	w.pair = nil
	return p
}

// dropPair frees a release waiting for w's try (handoff.go), when w
// answers its wait's first try without one.
func (r *room) dropPair(w *roomWaiter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w.withdraw()
}

// withdraw frees the release a try of w was promised to, if any: it goes
// alone at once. Called with w's room's mu held.
func (w *roomWaiter) withdraw() {
	if w.pair != nil {
		w.pair.Cancel()
		w.pair = nil
	}
}

// toldFirst notes that w was told it is first in the queue, as its try
// would have found; false: a release of this gateway sends its try along
// already (handoff.go), so it must try now.
func (r *room) toldFirst(w *roomWaiter) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w.pair != nil {
		return false
	}
	w.head = w.queued
	return true
}

func (r *room) tried(w *roomWaiter, queued, head bool) {
	r.mu.Lock()
	w.busy, w.queued, w.head = false, queued, queued && head
	w.tries++
	r.mu.Unlock()
}

// heartbeat runs heartbeat.lua for r about once a second, jittered so the
// gateways waiting on one key spread out, until r is closed.
func (s *Store) heartbeat(r *room) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		timer.Reset(waitRefresh - rand.N(waitRefresh/4))
		<-timer.C
		s.rooms.mu.Lock()
		open := s.rooms.byKey[r.id()] == r
		s.rooms.mu.Unlock()
		if !open {
			return
		}
		if r.sem {
			s.semBeat(r)
		} else {
			s.beat(r)
		}
	}
}

// oldest is r's oldest waiter (nil: none), as a heartbeat checks it: how
// many tries it had made, and whether it was settled in the queue.
func (r *room) oldest() (oldest *roomWaiter, tries int, settled bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.order.Front(); e != nil {
		oldest = e.Value.(*roomWaiter)
		tries, settled = oldest.tries, !oldest.busy && oldest.queued
	}
	return oldest, tries, settled
}

// lost is a heartbeat's answer that the oldest ticket is not in the queue.
// If its waiter is still here, believed it queued and has not tried since
// (a grant takes a ticket out), the queue was lost: everyone here queues
// again, in the order they try. Called with r.mu held.
func (r *room) lost(oldest *roomWaiter, tries int, settled bool) {
	if e := r.byID[oldest.ticket]; e != nil && settled && !oldest.busy && oldest.tries == tries {
		for e := r.order.Front(); e != nil; e = e.Next() {
			poke(e.Value.(*roomWaiter).wake)
		}
	}
}

// beat is one heartbeat of r.
func (s *Store) beat(r *room) {
	oldest, tries, settled := r.oldest()
	if oldest == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitRefresh)
	defer cancel()
	head, free, queued, err := script.Heartbeat(ctx, s.client, r.key, s.rooms.gateway, waitHeartbeat, oldest.ticket)
	if err != nil {
		return // the waiters' own deadlines bound them; try again next time
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if !queued {
		r.lost(oldest, tries, settled)
		return
	}
	if head == "" || !free {
		return // held: the first waiter knows when it ends, or is told
	}
	if e := r.byID[head]; e != nil {
		poke(e.Value.(*roomWaiter).wake) // free, and ours to take
	} else if len(head) > len(s.rooms.gateway) && head[:len(s.rooms.gateway)+1] == s.rooms.gateway+"." {
		// Our ticket, of a waiter that has gone without leaving (its
		// leave failed): take it out of the line.
		go s.leave(context.Background(), r.key, head)
	}
}

func poke(wake chan struct{}) {
	select {
	case wake <- struct{}{}:
	default: // already woken
	}
}
