package lockstore

import (
	"context"
	"errors"

	"github.com/lockgateway/lockgateway/lockstore/internal/listing"
)

// SemLister lists the semaphores with permits held whose keys start with
// a prefix, in key order, a page at a time, as Lister lists locks and at
// the same cost (one pass over the keys held per page, see Lister).
type SemLister interface {
	ListSemaphores(ctx context.Context, q ListQuery) (SemPage, error)
}

// ListedSemaphore is one semaphore in a page: its state as SemInspect
// reports it (never a token), and how many callers wait for a permit.
type ListedSemaphore struct {
	SemaphoreState
	// Waiters is the number of callers in the key's wait queue (Memory,
	// Redis); Redlock waits without a queue, so 0.
	Waiters int
}

// SemPage is one page of a listing of semaphores; Next as in ListPage.
type SemPage struct {
	Items []ListedSemaphore
	Next  string
}

// semKeyspace names a semaphore by its permits hash.
var semKeyspace = keyspace{tag: semTag, suffix: ":permits"}

var _ SemLister = (*Redis)(nil)

// ListSemaphores implements SemLister: SCAN of every master for permit
// hashes under the prefix, as Redis.List, then SemInspect of each and its
// queue's length.
func (s *Redis) ListSemaphores(ctx context.Context, q ListQuery) (SemPage, error) {
	if err := CheckList(q); err != nil {
		return SemPage{}, err
	}
	top, err := s.scanKeys(ctx, semKeyspace, q)
	if err != nil {
		return SemPage{}, err
	}
	keys, next := listing.Page(top, q.Limit)
	items := make([]ListedSemaphore, 0, len(keys))
	for _, key := range keys {
		st, err := s.SemInspect(ctx, key)
		if errors.Is(err, ErrNotHeld) { // its permits ended since the SCAN
			continue
		}
		if err != nil {
			return SemPage{}, err
		}
		waiters, err := s.client.ZCard(ctx, semQueueKey(key)).Result()
		if err != nil {
			return SemPage{}, redisErr(err)
		}
		items = append(items, ListedSemaphore{SemaphoreState: st, Waiters: int(waiters)})
	}
	return SemPage{Items: items, Next: next}, nil
}

var _ SemLister = (*Redlock)(nil)

// ListSemaphores implements SemLister: the keys a quorum of the nodes has
// (majorityKeys), each then inspected as SemInspect does, by quorum.
func (r *Redlock) ListSemaphores(ctx context.Context, q ListQuery) (SemPage, error) {
	if err := CheckList(q); err != nil {
		return SemPage{}, err
	}
	keys, next, _, _, _, err := r.majorityKeys(ctx, semKeyspace, q)
	if err != nil {
		return SemPage{}, err
	}
	items := make([]ListedSemaphore, 0, len(keys))
	for _, key := range keys {
		st, err := r.SemInspect(ctx, key)
		if errors.Is(err, ErrNotHeld) {
			continue
		}
		if err != nil {
			return SemPage{}, err
		}
		items = append(items, ListedSemaphore{SemaphoreState: st})
	}
	return SemPage{Items: items, Next: next}, nil
}
