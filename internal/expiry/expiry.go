// Package expiry is a queue of keys by deadline, for in-process stores that
// drop expired entries as they go: no goroutine per entry, and memory
// proportional to the entries still live.
package expiry

import (
	"container/heap"
	"time"
)

// Queue orders keys by deadline. It is not safe for concurrent use; its
// owner holds the lock.
type Queue[K comparable] struct{ h entries[K] }

// Entry is a key's place in the queue.
type Entry[K comparable] struct {
	Key   K
	At    time.Time // the deadline; keep a monotonic reading in it
	index int
}

// Add queues key for at.
func (q *Queue[K]) Add(key K, at time.Time) *Entry[K] {
	e := &Entry[K]{Key: key, At: at}
	heap.Push(&q.h, e)
	return e
}

// Move changes e's deadline.
func (q *Queue[K]) Move(e *Entry[K], at time.Time) {
	e.At = at
	heap.Fix(&q.h, e.index)
}

// Remove takes e out of the queue.
func (q *Queue[K]) Remove(e *Entry[K]) { heap.Remove(&q.h, e.index) }

// PopExpired removes every entry whose deadline is not after now, earliest
// first, calling drop with each key. A deadline equal to now has passed: a
// TTL of d lasts exactly d.
func (q *Queue[K]) PopExpired(now time.Time, drop func(K)) {
	for len(q.h) > 0 && !q.h[0].At.After(now) {
		drop(heap.Pop(&q.h).(*Entry[K]).Key)
	}
}

// Earliest is the soonest deadline in the queue; false when it is empty.
func (q *Queue[K]) Earliest() (time.Time, bool) {
	if len(q.h) == 0 {
		return time.Time{}, false
	}
	return q.h[0].At, true
}

// Len is the number of queued keys.
func (q *Queue[K]) Len() int { return len(q.h) }

// entries is a min-heap by deadline (container/heap.Interface).
type entries[K comparable] []*Entry[K]

func (h entries[K]) Len() int           { return len(h) }
func (h entries[K]) Less(i, j int) bool { return h[i].At.Before(h[j].At) }
func (h entries[K]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *entries[K]) Push(x any) {
	e := x.(*Entry[K])
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *entries[K]) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
