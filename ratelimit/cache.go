package ratelimit

import (
	"container/heap"
	"sync"
	"time"
)

// refusals remembers, per user, until when the user is known to be refused.
// Entries are dropped when their time comes (a min-heap by expiry), and the
// cache never holds more than max users: when full, a new user is simply not
// cached, which costs a store round trip, never a wrong answer.
type refusals struct {
	mu    sync.Mutex
	max   int
	users map[string]*refusal
	heap  refusalHeap
}

type refusal struct {
	user  string
	until time.Time // monotonic
	index int
}

func newRefusals(max int) *refusals {
	return &refusals{max: max, users: make(map[string]*refusal)}
}

// refusedFor returns how long user is still known to be refused, or 0.
func (c *refusals) refusedFor(user string, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evict(now)
	if r, ok := c.users[user]; ok {
		return r.until.Sub(now)
	}
	return 0
}

func (c *refusals) refuseUntil(user string, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evict(time.Now())
	if r, ok := c.users[user]; ok {
		if until.After(r.until) {
			r.until = until
			heap.Fix(&c.heap, r.index)
		}
		return
	}
	if len(c.users) >= c.max {
		return
	}
	r := &refusal{user: user, until: until}
	c.users[user] = r
	heap.Push(&c.heap, r)
}

func (c *refusals) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evict(time.Now())
	return len(c.users)
}

func (c *refusals) evict(now time.Time) {
	for len(c.heap) > 0 && !c.heap[0].until.After(now) {
		r := heap.Pop(&c.heap).(*refusal)
		delete(c.users, r.user)
	}
}

type refusalHeap []*refusal

func (h refusalHeap) Len() int           { return len(h) }
func (h refusalHeap) Less(i, j int) bool { return h[i].until.Before(h[j].until) }
func (h refusalHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *refusalHeap) Push(x any) {
	r := x.(*refusal)
	r.index = len(*h)
	*h = append(*h, r)
}
func (h *refusalHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return r
}
