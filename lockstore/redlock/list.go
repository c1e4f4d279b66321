package redlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/listing"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

var _ lockstore.Lister = (*Store)(nil)

// List implements Lister: what a majority of the nodes holds. Each node
// that counts (not down, not quarantined) is SCANned as Redis.List scans
// one, keeping its Limit+1 smallest keys; below the smallest last key of
// the nodes that kept that many, every node's keys are known, so a key is
// a candidate when a quorum of nodes has it, and the page ends there at
// the latest. Each candidate is then read on those nodes (list.lua) and
// listed when a quorum has it for one token, as Inspect reports it: the
// fence most of them carry, the smallest time left less the drift
// allowance. Without a quorum of nodes answering, ErrUnavailable.
func (r *Store) List(ctx context.Context, q lockstore.ListQuery) (lockstore.ListPage, error) {
	if err := lockstore.CheckList(q); err != nil {
		return lockstore.ListPage{}, err
	}
	keys, next, answered, failed, quarantined, err := r.majorityKeys(ctx, script.LocksKeyspace, q)
	if err != nil {
		return lockstore.ListPage{}, err
	}

	// Read before the reads start, so start+ttl is never later than a
	// node lets the lease go.
	start := time.Now()
	reads := make([][]script.NodeListed, len(r.nodes))
	errs := make([]error, len(r.nodes))
	read := make([]bool, len(r.nodes))
	var wg sync.WaitGroup
	for i, ok := range answered {
		if ok {
			wg.Go(func() { reads[i], errs[i] = script.ReadListed(ctx, r.nodes[i].client, keys) })
		}
	}
	wg.Wait()
	unread := 0
	for i, ok := range answered {
		read[i] = ok && errs[i] == nil
		if ok && !read[i] {
			unread++
		}
	}
	if !r.q().all(read) {
		return lockstore.ListPage{}, r.quorumError(failed+unread, quarantined, 0)
	}
	items := make([]lockstore.Listed, 0, len(keys))
	for j, key := range keys {
		holders := map[string][]script.NodeListed{} // by token digest
		holdersAt := map[string][]bool{}
		for i := range r.nodes {
			// A provisional value is no lease until a round confirms it.
			if read[i] && reads[i][j].Held && !reads[i][j].Value.Provisional() {
				d := reads[i][j].Value.Digest
				holders[d] = append(holders[d], reads[i][j])
				if holdersAt[d] == nil {
					holdersAt[d] = make([]bool, len(r.nodes))
				}
				holdersAt[d][i] = true
			}
		}
		for d, hs := range holders {
			if !r.q().any(holdersAt[d]) {
				continue
			}
			l, _ := readLease(key, start, hs)
			items = append(items, l)
		}
	}
	return lockstore.ListPage{Items: items, Next: next}, nil
}

// readLease is the lease a read reports (Inspect, List) from hs, one
// token's confirmed values on a quorum of the nodes read: the fence most
// of them carry, the smallest time left less the drift allowance, from
// start, the read's start, so never later than a node lets it go, and the
// most waiters a node counted; longest is the longest time left
// (watchLate).
func readLease(key string, start time.Time, hs []script.NodeListed) (_ lockstore.Listed, longest time.Duration) {
	values := make([]script.LockValue, len(hs))
	remaining, longest, waiters := hs[0].Remaining, hs[0].Remaining, 0
	for i, h := range hs {
		values[i] = h.Value
		remaining = min(remaining, h.Remaining)
		longest = max(longest, h.Remaining)
		waiters = max(waiters, h.Waiters)
	}
	v := lockValues.majority(values)
	ttl := max(remaining-script.Drift(remaining), 0)
	return lockstore.Listed{
		Lease:   lockstore.Lease{Key: key, Owner: v.Owner, Fence: v.Fence, Granted: v.Length, Left: ttl, ExpiresAt: start.Add(ttl)},
		Waiters: waiters,
	}, longest
}

// majorityKeys finds a page's candidate keys of keyspace ks: the keys a
// majority of some list of the counting nodes has, up to q.Limit of them,
// with the page's Next, and the nodes that answered, by index (failed and
// quarantined count those that did not, for a quorum error later).
func (r *Store) majorityKeys(ctx context.Context, ks script.Keyspace, q lockstore.ListQuery) (keys []string, next string, answered []bool, failed, quarantined int, err error) {
	nodes, failed, quarantined := r.counting()
	if !r.q().all(nodes) {
		return nil, "", nil, failed, quarantined, r.quorumError(failed, quarantined, 0)
	}
	windows := make([]*listing.Smallest, len(r.nodes))
	errs := make([]error, len(r.nodes))
	var wg sync.WaitGroup
	for i, counts := range nodes {
		if counts {
			wg.Go(func() {
				windows[i] = listing.NewSmallest(q.Limit + 1)
				errs[i] = script.ScanKeyspace(ctx, r.nodes[i].client, ks, q, windows[i])
			})
		}
	}
	wg.Wait()
	answered = make([]bool, len(r.nodes))
	var kept []*listing.Smallest
	for i, counts := range nodes {
		if !counts {
			continue
		}
		if errs[i] != nil {
			failed++
			continue
		}
		answered[i] = true
		kept = append(kept, windows[i])
	}
	if !r.q().all(answered) {
		return nil, "", nil, failed, quarantined, r.quorumError(failed, quarantined, 0)
	}

	// bound: every key at or below it is known on every answering node.
	bound, bounded := "", false
	for _, w := range kept {
		if w.Full() && (!bounded || w.Keys[len(w.Keys)-1] < bound) {
			bound, bounded = w.Keys[len(w.Keys)-1], true
		}
	}
	has := map[string][]bool{} // key → the nodes that have it
	for i, counts := range answered {
		if !counts {
			continue
		}
		for _, k := range windows[i].Keys {
			if !bounded || k <= bound {
				if has[k] == nil {
					has[k] = make([]bool, len(r.nodes))
				}
				has[k][i] = true
			}
		}
	}
	var candidates []string
	for _, k := range script.SortedKeys(has) {
		if r.q().any(has[k]) {
			candidates = append(candidates, k)
		}
	}
	keys, next = listing.Page(candidates, q.Limit)
	if next == "" && bounded {
		next = bound
	}
	return keys, next, answered, failed, quarantined, nil
}

// counting returns the nodes whose answers count now, by index, and how
// many do not: down, or quarantined after a restart.
func (r *Store) counting() (nodes []bool, down, quarantined int) {
	now := time.Now()
	nodes = make([]bool, len(r.nodes))
	for i, n := range r.nodes {
		switch {
		case n.isDown():
			down++
		case n.quarantined(now):
			quarantined++
		default:
			nodes[i] = true
		}
	}
	return nodes, down, quarantined
}

var _ lockstore.SemLister = (*Store)(nil)

// ListSemaphores implements SemLister: the keys a quorum of the nodes has
// (majorityKeys), each then inspected as SemInspect does, by quorum.
func (r *Store) ListSemaphores(ctx context.Context, q lockstore.ListQuery) (lockstore.SemPage, error) {
	if err := lockstore.CheckList(q); err != nil {
		return lockstore.SemPage{}, err
	}
	keys, next, _, _, _, err := r.majorityKeys(ctx, script.SemKeyspace, q)
	if err != nil {
		return lockstore.SemPage{}, err
	}
	items := make([]lockstore.ListedSemaphore, 0, len(keys))
	for _, key := range keys {
		st, err := r.SemInspect(ctx, key)
		if errors.Is(err, lockstore.ErrNotHeld) {
			continue
		}
		if err != nil {
			return lockstore.SemPage{}, err
		}
		items = append(items, lockstore.ListedSemaphore{SemaphoreState: st})
	}
	return lockstore.SemPage{Items: items, Next: next}, nil
}
