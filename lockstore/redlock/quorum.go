package redlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

// quorums are the node lists a Redlock counts by: one, or during a
// transition (docs/safety.md, rule T) the new list and the previous one.
// A quorum is a set of nodes holding a majority of every list, so any two
// quorums of gateways that count one list in common share a node.
type quorums []quorumList

// quorumList is one node list: which of the Redlock's nodes are in it,
// and how many of them are a majority.
type quorumList struct {
	in   []bool // by node index
	need int
}

func newQuorumList(in []bool) quorumList {
	n := 0
	for _, b := range in {
		if b {
			n++
		}
	}
	return quorumList{in: in, need: n/2 + 1}
}

// count is how many of the list's nodes m holds.
func (l quorumList) count(m []bool) int {
	n := 0
	for i, b := range m {
		if b && l.in[i] {
			n++
		}
	}
	return n
}

// all: m holds a majority of every list: a quorum, what a grant, a
// confirmation, an extend and a release's deletes need.
func (q quorums) all(m []bool) bool {
	for _, l := range q {
		if l.count(m) < l.need {
			return false
		}
	}
	return true
}

// any: m holds a majority of some list. A lease granted before a
// transition holds a majority of the previous list only; reads see it
// held, and "not held" means a majority of no list.
func (q quorums) any(m []bool) bool {
	for _, l := range q {
		if l.count(m) >= l.need {
			return true
		}
	}
	return false
}

// covers: wherever could holds a majority of a list, done holds one too.
// A release is done when its deletes hold a majority of every list the
// lease could hold one of (docs/safety.md, G2).
func (q quorums) covers(could, done []bool) bool {
	for _, l := range q {
		if l.count(could) >= l.need && l.count(done) < l.need {
			return false
		}
	}
	return true
}

// need is the votes a quorum needs, for messages: the new list's majority.
func (q quorums) need() int { return q[0].need }

// q is the quorums the Redlock counts by now.
func (r *Store) q() quorums { return *r.quorums.Load() }

// or is the union of two masks, by node.
func or(a, b []bool) []bool {
	m := make([]bool, len(a))
	for i := range a {
		m[i] = a[i] || b[i]
	}
	return m
}

// quorumError counts failed as not answering, except the refusals among
// them.
func (r *Store) quorumError(failed, quarantined, refused int) error {
	e := &lockstore.QuorumError{Nodes: len(r.nodes), Quorum: r.q().need(), Failed: failed - refused, Quarantined: quarantined, Refused: refused}
	if refused > 0 {
		e.NodeList = r.set.reason()
	}
	return e
}

// nodeResult is one node's answer to one call.
type nodeResult[T any] struct {
	val T
	err error
	// counted is false when the node was quarantined when its reply
	// arrived. It is read after the reply, so a reply from a restarted
	// process is never counted: its connection's OnConnect had already
	// quarantined the node.
	counted bool
}

var errSkipped = errors.New("lockstore: node not asked")

// fanOut calls every node (or those in only, when not nil) concurrently,
// all under one NodeTimeout (they start together), and waits for all of
// them. call gets the node and its index. The calls run on r.spawn's
// goroutines (aside.Go's workers, whose stacks have grown already), the
// last one on the caller's goroutine once the others are on their way: a
// goroutine started per node call grew its stack at every call, a tenth
// of a Redlock gateway's CPU in issue #30's profile.
func fanOut[T any](ctx context.Context, r *Store, only []bool, call func(context.Context, int, *redlockNode) (T, error)) []nodeResult[T] {
	return fanOutWithin(ctx, r, r.nodeTimeout, only, call)
}

// fanOutWithin is fanOut with the calls' time bounded by timeout instead
// of NodeTimeout.
func fanOutWithin[T any](ctx context.Context, r *Store, timeout time.Duration, only []bool, call func(context.Context, int, *redlockNode) (T, error)) []nodeResult[T] {
	res := make([]nodeResult[T], len(r.nodes))
	nctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	one := func(i int) {
		n := r.nodes[i]
		v, err := call(nctx, i, n)
		r.observe(ctx, n, err)
		if err != nil && !answered(err) && !errors.Is(err, lockstore.ErrUnavailable) && !errors.Is(err, script.ErrMoved) {
			r.log.Error().Err(err).Str("node", n.addr).Msg("redlock: unexpected reply")
		}
		res[i] = nodeResult[T]{val: v, err: err, counted: !n.quarantined(time.Now())}
		if quarantinedOnNode(err) {
			// The node keeps a quarantine of its own (rule Q): it counts
			// as one this gateway quarantined, in neither direction.
			res[i] = nodeResult[T]{counted: false}
		}
	}
	asked := make([]int, 0, len(r.nodes))
	for i, n := range r.nodes {
		switch {
		case only != nil && !only[i]:
			res[i].err = errSkipped
		case n.isDown():
			res[i] = nodeResult[T]{err: errNodeDown, counted: !n.quarantined(time.Now())}
		default:
			asked = append(asked, i)
		}
	}
	if len(asked) == 0 {
		return res
	}
	var wg sync.WaitGroup
	for _, i := range asked[:len(asked)-1] {
		wg.Add(1)
		r.spawn(func() {
			defer wg.Done()
			one(i)
		})
	}
	one(asked[len(asked)-1])
	wg.Wait()
	return res
}

// quarantinedOnNode: the node refused because it keeps a quarantine of its
// own (nodeset.lua; docs/safety.md, "Restarted nodes", rule Q).
func quarantinedOnNode(err error) bool {
	var re *lockstore.RefusedError
	return errors.As(err, &re) && re.Reason == "quarantine"
}

// answered reports whether err is a node's domain answer rather than a
// failure to answer.
func answered(err error) bool {
	return err == nil || errors.Is(err, lockstore.ErrNotHeld) || errors.Is(err, lockstore.ErrTokenMismatch)
}

func answeredMask[T any](votes []nodeResult[T]) []bool {
	m := make([]bool, len(votes))
	for i, v := range votes {
		m[i] = answered(v.err)
	}
	return m
}

// ownedTally counts the answers to a call that only the token's holder may
// make (Extend, Release).
type ownedTally[T any] struct {
	ok                           []T
	okAt, mismatchAt, unknownAt  []bool // by node; unknown: failed or quarantined
	forcedAt                     []bool // by node: answered ErrForced
	failed, quarantined, refused int    // refused: among failed
}

func tallyOwned[T any](votes []nodeResult[T]) ownedTally[T] {
	t := ownedTally[T]{okAt: make([]bool, len(votes)), mismatchAt: make([]bool, len(votes)), unknownAt: make([]bool, len(votes)), forcedAt: make([]bool, len(votes))}
	for i, v := range votes {
		switch {
		case !answered(v.err):
			t.unknownAt[i] = true
			t.failed++
			if errors.Is(v.err, lockstore.ErrRefused) {
				t.refused++
			}
		case !v.counted:
			t.unknownAt[i] = true
			t.quarantined++
		case v.err == nil:
			t.ok = append(t.ok, v.val)
			t.okAt[i] = true
		case errors.Is(v.err, lockstore.ErrTokenMismatch):
			t.mismatchAt[i] = true
		}
		t.forcedAt[i] = v.counted && errors.Is(v.err, lockstore.ErrForced)
	}
	return t
}

// decide is the answer the tally of an extend or a release's read gives
// when its oks are no quorum: another token holds a majority of some list
// and the token a majority of none (ErrTokenMismatch); the token could
// hold a majority of no list, counting the nodes that did not answer
// (ErrNotHeld); or ErrUnavailable.
//
// Either of the first two is marked ErrForced (lockstore.Forced) when the
// nodes that answered that a forced release took the token's lease or
// permit (extend.lua's, sem_extend.lua's -4) are a majority of some list,
// as a forced release needs to succeed (G2). On a minority, the answer is
// what it was without them: a forced release that reached only a minority
// failed, and that minority is no evidence of why the lease is gone
// (docs/safety.md, "Forced releases").
func (t ownedTally[T]) decide(r *Store) error {
	var err error
	q := r.q()
	switch {
	case q.any(t.mismatchAt) && !q.any(t.okAt):
		// Not while the token holds a majority of some list: during a
		// transition a lease granted by a majority of the new list
		// alone can share the old list's majority with another token's
		// values (provisional ones, leftovers of the old list), and a
		// gateway that has not seen the finish yet must not tell the
		// holder that another holds its key (rule T; found by make
		// chaos). It could not reach every list: unavailable.
		err = lockstore.ErrTokenMismatch
	case !q.any(or(t.okAt, t.unknownAt)):
		err = lockstore.ErrNotHeld
	default:
		return t.unavailable(r)
	}
	if q.any(t.forcedAt) {
		return lockstore.Forced(err)
	}
	return err
}

func (t ownedTally[T]) unavailable(r *Store) error {
	return r.quorumError(t.failed, t.quarantined, t.refused)
}

// heldTally groups what a read of every node found held, by holder (a
// token's digest; for a permit, its slot and digest), with the nodes that
// carry each, and marks the nodes whose answer is unknown: failed, or
// quarantined. Inspect, SemInspect and a forced release's read decide by
// it.
type heldTally[K comparable, V any] struct {
	found               map[K][]V
	at                  map[K][]bool // by node
	unknownAt           []bool
	failed, quarantined int
}

// tallyHeld reads votes; read gets each counted node's answer and adds
// what it holds by holder (only confirmed values: a provisional one is no
// lease or permit until a round confirms it).
func tallyHeld[R any, K comparable, V any](votes []nodeResult[R], read func(v R, add func(K, V))) heldTally[K, V] {
	t := heldTally[K, V]{found: make(map[K][]V), at: make(map[K][]bool), unknownAt: make([]bool, len(votes))}
	for i, v := range votes {
		switch {
		case !answered(v.err):
			t.unknownAt[i] = true
			t.failed++
		case !v.counted:
			t.unknownAt[i] = true
			t.quarantined++
		case v.err == nil:
			read(v.val, func(k K, x V) {
				t.found[k] = append(t.found[k], x)
				if t.at[k] == nil {
					t.at[k] = make([]bool, len(votes))
				}
				t.at[k][i] = true
			})
		}
	}
	return t
}

// could: k could hold a majority of some list, counting the nodes whose
// answer is unknown.
func (t heldTally[K, V]) could(r *Store, k K) bool { return r.q().any(or(t.at[k], t.unknownAt)) }

// missing is the answer of a read that found no holder it looked for on a
// quorum: ErrNotHeld when none could hold one either (could: none of those
// found, and no holder on the unknown nodes alone), else a quorum error.
func (t heldTally[K, V]) missing(r *Store, could bool) error {
	if !could && !r.q().any(t.unknownAt) {
		return lockstore.ErrNotHeld
	}
	return r.quorumError(t.failed, t.quarantined, 0)
}

// majority is the value most of vs carry, by fence (the highest fence on
// a tie), for a lock or a permit alike. After a grant, a majority carries
// the grant's fence; a node that granted too late to be counted may carry
// its own.
func (k valueKind[V]) majority(vs []V) V {
	count := make(map[int64]int, len(vs))
	best := vs[0]
	for _, v := range vs {
		f := k.fence(v)
		count[f]++
		if c, b := count[f], count[k.fence(best)]; c > b || (c == b && f > k.fence(best)) {
			best = v
		}
	}
	return best
}

// heldRemaining is how long until, in every list, fewer than a majority
// of the nodes that answered "held" still hold the key: per list the
// majority-th longest remaining TTL among them (the shortest when fewer
// said held), the longest of those. held is by node; a negative duration
// is a node that did not say held.
func (r *Store) heldRemaining(held []time.Duration) time.Duration {
	var longest time.Duration
	for _, l := range r.q() {
		var in []time.Duration
		for i, d := range held {
			if d >= 0 && l.in[i] {
				in = append(in, d)
			}
		}
		if len(in) == 0 {
			continue
		}
		slices.Sort(in)
		slices.Reverse(in)
		longest = max(longest, in[min(l.need, len(in))-1])
	}
	return longest
}
