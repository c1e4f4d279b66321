package memory

import (
	"context"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/listing"
)

// List implements lockstore.Lister: one pass over the map under the store's mutex,
// which every lock operation waits for meanwhile (docs/api.md gives the
// measured cost per lock held).
func (m *Store) List(ctx context.Context, q lockstore.ListQuery) (lockstore.ListPage, error) {
	if err := lockstore.CheckList(q); err != nil {
		return lockstore.ListPage{}, err
	}
	if err := ctx.Err(); err != nil {
		return lockstore.ListPage{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.reclaim()
	top := listing.NewSmallest(q.Limit + 1)
	for key := range m.locks {
		if q.Includes(key) {
			top.Offer(key)
		}
	}
	keys, next := listing.Page(top.Keys, q.Limit)
	items := make([]lockstore.Listed, 0, len(keys))
	for _, key := range keys {
		l := m.locks[key]
		lease := l.lease("")
		lease.Left = l.expires.At.Sub(now)
		items = append(items, lockstore.Listed{Lease: lease, Waiters: len(m.queues[key])})
	}
	return lockstore.ListPage{Items: items, Next: next}, nil
}

// ListSemaphores implements lockstore.SemLister: one pass over the
// semaphores under their mutex, as Store.List does over the locks.
func (m *Store) ListSemaphores(ctx context.Context, q lockstore.ListQuery) (lockstore.SemPage, error) {
	if err := lockstore.CheckList(q); err != nil {
		return lockstore.SemPage{}, err
	}
	if err := ctx.Err(); err != nil {
		return lockstore.SemPage{}, err
	}
	ss := &m.sems
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := ss.reclaim()
	top := listing.NewSmallest(q.Limit + 1)
	for key, s := range ss.keys {
		if len(s.permits) > 0 && q.Includes(key) {
			top.Offer(key)
		}
	}
	keys, next := listing.Page(top.Keys, q.Limit)
	items := make([]lockstore.ListedSemaphore, 0, len(keys))
	for _, key := range keys {
		s := ss.keys[key]
		items = append(items, lockstore.ListedSemaphore{SemaphoreState: s.state(key, now), Waiters: len(s.queue)})
	}
	return lockstore.SemPage{Items: items, Next: next}, nil
}
