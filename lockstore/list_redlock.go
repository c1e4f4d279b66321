package lockstore

import (
	"context"
	"slices"
	"sync"
	"time"
)

// List implements Lister: what a majority of the nodes holds. Each node
// that counts (not down, not quarantined) is SCANned as Redis.List scans
// one, keeping its Limit+1 smallest keys; below the smallest last key of
// the nodes that kept that many, every node's keys are known, so a key is
// a candidate when a quorum of nodes has it, and the page ends there at
// the latest. Each candidate is then read on those nodes (list.lua) and
// listed when a quorum has it for one token, as Inspect reports it: the
// fence most of them carry, the smallest time left less the drift
// allowance. Without a quorum of nodes answering, ErrUnavailable.
func (r *Redlock) List(ctx context.Context, q ListQuery) (ListPage, error) {
	if err := checkList(q); err != nil {
		return ListPage{}, err
	}
	keys, next, answered, failed, quarantined, err := r.majorityKeys(ctx, locksKeyspace, q)
	if err != nil {
		return ListPage{}, err
	}

	// Read before the reads start, so start+ttl is never later than a
	// node lets the lease go.
	start := time.Now()
	reads := make([][]nodeListed, len(answered))
	errs := make([]error, len(answered))
	var wg sync.WaitGroup
	for i, n := range answered {
		wg.Go(func() { reads[i], errs[i] = readListed(ctx, n.client, keys) })
	}
	wg.Wait()
	read := 0
	for _, err := range errs {
		if err == nil {
			read++
		}
	}
	if read < r.quorum {
		return ListPage{}, r.quorumError(failed+len(answered)-read, quarantined, 0)
	}
	items := make([]Listed, 0, len(keys))
	for j, key := range keys {
		holders := map[string][]nodeListed{} // by token digest
		for i := range answered {
			// A provisional value is no lease until a round confirms it.
			if errs[i] == nil && reads[i][j].held && !reads[i][j].value.provisional() {
				d := reads[i][j].value.digest
				holders[d] = append(holders[d], reads[i][j])
			}
		}
		for _, hs := range holders {
			if len(hs) < r.quorum {
				continue
			}
			values := make([]lockValue, len(hs))
			remaining, waiters := hs[0].remaining, 0
			for i, h := range hs {
				values[i] = h.value
				remaining = min(remaining, h.remaining)
				waiters = max(waiters, h.waiters)
			}
			v := majorityValue(values)
			ttl := max(remaining-drift(remaining), 0)
			items = append(items, Listed{
				Lease:   Lease{Key: key, Owner: v.owner, Fence: v.fence, Granted: v.length, Left: ttl, ExpiresAt: start.Add(ttl)},
				Waiters: waiters,
			})
		}
	}
	return ListPage{Items: items, Next: next}, nil
}

// majorityKeys finds a page's candidate keys of keyspace ks: the keys a
// quorum of the counting nodes has, up to q.Limit of them, with the page's
// Next, and the nodes that answered (failed and quarantined count those
// that did not, for a quorum error later).
func (r *Redlock) majorityKeys(ctx context.Context, ks keyspace, q ListQuery) (keys []string, next string, answered []*redlockNode, failed, quarantined int, err error) {
	nodes, failed, quarantined := r.counting()
	if len(nodes) < r.quorum {
		return nil, "", nil, failed, quarantined, r.quorumError(failed, quarantined, 0)
	}
	windows := make([]*smallest, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			windows[i] = newSmallest(q.Limit + 1)
			errs[i] = scanKeyspace(ctx, n.client, ks, q, windows[i])
		})
	}
	wg.Wait()
	var kept []*smallest
	for i, err := range errs {
		if err != nil {
			failed++
			continue
		}
		answered = append(answered, nodes[i])
		kept = append(kept, windows[i])
	}
	if len(answered) < r.quorum {
		return nil, "", nil, failed, quarantined, r.quorumError(failed, quarantined, 0)
	}

	// bound: every key at or below it is known on every answering node.
	bound, bounded := "", false
	for _, w := range kept {
		if w.Full() && (!bounded || w.Keys[len(w.Keys)-1] < bound) {
			bound, bounded = w.Keys[len(w.Keys)-1], true
		}
	}
	count := map[string]int{}
	for _, w := range kept {
		for _, k := range w.Keys {
			if !bounded || k <= bound {
				count[k]++
			}
		}
	}
	var candidates []string
	for _, k := range sortedKeys(count) {
		if count[k] >= r.quorum {
			candidates = append(candidates, k)
		}
	}
	keys, next = page(candidates, q.Limit)
	if next == "" && bounded {
		next = bound
	}
	return keys, next, answered, failed, quarantined, nil
}

// counting returns the nodes whose answers count now, and how many do
// not: down, or quarantined after a restart.
func (r *Redlock) counting() (nodes []*redlockNode, down, quarantined int) {
	now := time.Now()
	for _, n := range r.nodes {
		switch {
		case n.isDown():
			down++
		case n.quarantined(now):
			quarantined++
		default:
			nodes = append(nodes, n)
		}
	}
	return slices.Clip(nodes), down, quarantined
}
