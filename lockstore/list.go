package lockstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Lister lists the locks a store holds whose keys start with a prefix, in
// key order, a page at a time. Every backend implements it.
//
// Cost: no backend keeps an index ordered by key, so each page is one pass
// over the keys the store holds (Memory: its map, under its mutex; Redis:
// SCAN of the whole keyspace of every master, in calls of listScanCount
// keys each; Redlock: the same on every node), keeping only the Limit+1
// smallest keys after the cursor. A page's memory is bounded by Limit, its
// time grows with the keys held. An index maintained by the lock scripts
// would make pages cheap but every grant dearer, and on a Redis Cluster it
// cannot be kept in the script that grants (a lock and an index live in
// different slots): see docs/api.md, "Listing locks".
type Lister interface {
	List(ctx context.Context, q ListQuery) (ListPage, error)
}

// ListQuery asks for one page.
type ListQuery struct {
	// Prefix: only keys that start with it; "" lists every key.
	Prefix string
	// After: only keys after it (byte order), the Next of the page
	// before; "" starts at the first key.
	After string
	// Limit is the most items the page holds, at least 1.
	Limit int
}

// Listed is one held lock in a page: its lease, never with a token (Left
// and ExpiresAt as Inspect reports them), and how many callers wait for it.
type Listed struct {
	Lease
	// Waiters is the number of callers in the key's wait queue (Memory,
	// Redis); Redlock waits without a queue, so 0.
	Waiters int
}

// ListPage is one page of a listing.
type ListPage struct {
	Items []Listed
	// Next is the After of the next page; "" when this page is the last.
	// A page may hold fewer than Limit items (locks that ended while it
	// was read, or on Redlock keys held by a minority) and still have a
	// Next: only an empty Next ends a listing.
	Next string
}

var (
	_ Lister = (*Memory)(nil)
	_ Lister = (*Redis)(nil)
	_ Lister = (*Redlock)(nil)
)

// MaxListLimit is the largest ListQuery.Limit a store accepts: it bounds
// what one page holds in memory.
const MaxListLimit = 1000

func checkList(q ListQuery) error {
	switch {
	case q.Limit < 1 || q.Limit > MaxListLimit:
		return fmt.Errorf("%w: list limit %d not in 1..%d", ErrInvalid, q.Limit, MaxListLimit)
	case q.After != "" && !strings.HasPrefix(q.After, q.Prefix):
		return fmt.Errorf("%w: the cursor is not inside the prefix", ErrInvalid)
	}
	return nil
}

// listable reports whether key is a lock a listing shows: it starts with
// the prefix, comes after the cursor, and is not a rate-limit window
// (which lives among the leases of stores without windows of their own).
func (q ListQuery) listable(key string) bool {
	return strings.HasPrefix(key, q.Prefix) && key > q.After && !strings.HasPrefix(key, windowPrefix)
}

// smallest keeps the n smallest distinct keys it is offered, so a pass
// over any number of keys holds n of them at most. n is small (a page and
// one), so a sorted slice is as quick as a heap.
type smallest struct {
	n    int
	keys []string // sorted, distinct
}

func newSmallest(n int) *smallest { return &smallest{n: n, keys: make([]string, 0, n)} }

func (s *smallest) offer(key string) {
	if len(s.keys) == s.n && key >= s.keys[len(s.keys)-1] {
		return
	}
	i, found := slices.BinarySearch(s.keys, key)
	if found {
		return
	}
	if len(s.keys) == s.n {
		s.keys = s.keys[:len(s.keys)-1]
	}
	s.keys = slices.Insert(s.keys, i, key)
}

// full reports whether s holds n keys: then every key it was not offered,
// or dropped, is above its last.
func (s *smallest) full() bool { return len(s.keys) == s.n }

// page cuts the sorted candidates (at most limit+1 of them) into the keys
// of a page and its Next: with more than limit, there is a next page,
// which starts after the page's last key.
func page(candidates []string, limit int) (keys []string, next string) {
	if len(candidates) > limit {
		return candidates[:limit], candidates[limit-1]
	}
	return candidates, ""
}
