package redis

import (
	"context"
	_ "embed"
	"errors"
	"sync"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/listing"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/redis/go-redis/v9"
)

var _ lockstore.Lister = (*Store)(nil)

// List implements Lister: SCAN (never KEYS) of every master's keyspace for
// lock keys under the prefix, keeping the Limit+1 smallest after the
// cursor, then one read (list.lua) of each of the page's locks, pipelined.
// A master that does not answer fails the listing (ErrUnavailable): a
// page without its locks would say they are free.
func (s *Store) List(ctx context.Context, q lockstore.ListQuery) (lockstore.ListPage, error) {
	if err := lockstore.CheckList(q); err != nil {
		return lockstore.ListPage{}, err
	}
	top, err := s.scan(ctx, q)
	if err != nil {
		return lockstore.ListPage{}, err
	}
	keys, next := listing.Page(top, q.Limit)
	items, err := script.ReadListed(ctx, s.client, keys)
	if err != nil {
		return lockstore.ListPage{}, err
	}
	out := make([]lockstore.Listed, 0, len(keys))
	for _, it := range items {
		if it.Held {
			out = append(out, it.Listed())
		}
	}
	return lockstore.ListPage{Items: out, Next: next}, nil
}

// scan returns the Limit+1 smallest listable lock keys, sorted.
func (s *Store) scan(ctx context.Context, q lockstore.ListQuery) ([]string, error) {
	return s.scanKeys(ctx, script.LocksKeyspace, q)
}

// scanKeys returns the Limit+1 smallest listable keys of ks, sorted: on a
// Cluster the smallest of each master's, merged (a key lives on one
// master).
func (s *Store) scanKeys(ctx context.Context, ks script.Keyspace, q lockstore.ListQuery) ([]string, error) {
	cc, ok := s.client.(*redis.ClusterClient)
	if !ok {
		top := listing.NewSmallest(q.Limit + 1)
		// Two statements: Go leaves the order of top.Keys and a call in
		// one return list unspecified.
		err := script.ScanKeyspace(ctx, s.client, ks, q, top)
		return top.Keys, err
	}
	var mu sync.Mutex
	all := listing.NewSmallest(q.Limit + 1)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		top := listing.NewSmallest(q.Limit + 1)
		if err := script.ScanKeyspace(ctx, c, ks, q, top); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, k := range top.Keys {
			all.Offer(k)
		}
		return nil
	})
	if err != nil {
		return nil, script.RedisErr(err)
	}
	return all.Keys, nil
}

var _ lockstore.SemLister = (*Store)(nil)

// ListSemaphores implements SemLister: SCAN of every master for permit
// hashes under the prefix, as Redis.List, then SemInspect of each and its
// queue's length.
func (s *Store) ListSemaphores(ctx context.Context, q lockstore.ListQuery) (lockstore.SemPage, error) {
	if err := lockstore.CheckList(q); err != nil {
		return lockstore.SemPage{}, err
	}
	top, err := s.scanKeys(ctx, script.SemKeyspace, q)
	if err != nil {
		return lockstore.SemPage{}, err
	}
	keys, next := listing.Page(top, q.Limit)
	items := make([]lockstore.ListedSemaphore, 0, len(keys))
	for _, key := range keys {
		st, err := s.SemInspect(ctx, key)
		if errors.Is(err, lockstore.ErrNotHeld) { // its permits ended since the SCAN
			continue
		}
		if err != nil {
			return lockstore.SemPage{}, err
		}
		waiters, err := s.client.ZCard(ctx, script.SemQueueKey(key)).Result()
		if err != nil {
			return lockstore.SemPage{}, script.RedisErr(err)
		}
		items = append(items, lockstore.ListedSemaphore{SemaphoreState: st, Waiters: int(waiters)})
	}
	return lockstore.SemPage{Items: items, Next: next}, nil
}
