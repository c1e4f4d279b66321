package lockstore

import (
	"context"

	"github.com/lockgateway/lockgateway/lockstore/internal/listing"
)

// List implements Lister: one pass over the map under the store's mutex,
// which every lock operation waits for meanwhile (docs/api.md gives the
// measured cost per lock held).
func (m *Memory) List(ctx context.Context, q ListQuery) (ListPage, error) {
	if err := CheckList(q); err != nil {
		return ListPage{}, err
	}
	if err := ctx.Err(); err != nil {
		return ListPage{}, err
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
	items := make([]Listed, 0, len(keys))
	for _, key := range keys {
		l := m.locks[key]
		lease := l.lease("")
		lease.Left = l.expires.At.Sub(now)
		items = append(items, Listed{Lease: lease, Waiters: len(m.queues[key])})
	}
	return ListPage{Items: items, Next: next}, nil
}
