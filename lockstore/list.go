package lockstore

import (
	"context"
	"fmt"
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

// MaxListLimit is the largest ListQuery.Limit a store accepts: it bounds
// what one page holds in memory.
const MaxListLimit = 1000

// CheckList checks a List's or a ListSemaphores' query.
func CheckList(q ListQuery) error {
	switch {
	case q.Limit < 1 || q.Limit > MaxListLimit:
		return fmt.Errorf("%w: list limit %d not in 1..%d", ErrInvalid, q.Limit, MaxListLimit)
	case q.After != "" && !strings.HasPrefix(q.After, q.Prefix):
		return fmt.Errorf("%w: the cursor is not inside the prefix", ErrInvalid)
	}
	return nil
}

// Includes reports whether a page of q may show key: it starts with the
// prefix, comes after the cursor, and is not a rate-limit window (which
// lives among the leases of stores without windows of their own).
func (q ListQuery) Includes(key string) bool {
	return strings.HasPrefix(key, q.Prefix) && key > q.After && !IsWindowKey(key)
}
