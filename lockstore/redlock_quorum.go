package lockstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// quorumError counts failed as not answering, except the refusals among
// them.
func (r *Redlock) quorumError(failed, quarantined, refused int) error {
	e := &QuorumError{Nodes: len(r.nodes), Quorum: r.quorum, Failed: failed - refused, Quarantined: quarantined, Refused: refused}
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
// each under its own NodeTimeout, and waits for all of them. call gets the
// node and its index.
func fanOut[T any](ctx context.Context, r *Redlock, only []bool, call func(context.Context, int, *redlockNode) (T, error)) []nodeResult[T] {
	res := make([]nodeResult[T], len(r.nodes))
	var wg sync.WaitGroup
	for i, n := range r.nodes {
		if only != nil && !only[i] {
			res[i].err = errSkipped
			continue
		}
		if n.isDown() {
			res[i] = nodeResult[T]{err: errNodeDown, counted: !n.quarantined(time.Now())}
			continue
		}
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, r.nodeTimeout)
			defer cancel()
			v, err := call(nctx, i, n)
			r.observe(ctx, n, err)
			if err != nil && !answered(err) && !errors.Is(err, ErrUnavailable) && !errors.Is(err, errMoved) {
				r.log.Error().Err(err).Str("node", n.addr).Msg("redlock: unexpected reply")
			}
			res[i] = nodeResult[T]{val: v, err: err, counted: !n.quarantined(time.Now())}
			if quarantinedOnNode(err) {
				// The node keeps a quarantine of its own (rule Q): it counts
				// as one this gateway quarantined, in neither direction.
				res[i] = nodeResult[T]{counted: false}
			}
		})
	}
	wg.Wait()
	return res
}

// quarantinedOnNode: the node refused because it keeps a quarantine of its
// own (nodeset.lua; docs/safety.md, "Restarted nodes", rule Q).
func quarantinedOnNode(err error) bool {
	var re *RefusedError
	return errors.As(err, &re) && re.Reason == "quarantine"
}

// answered reports whether err is a node's domain answer rather than a
// failure to answer.
func answered(err error) bool {
	return err == nil || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrTokenMismatch)
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
	mismatch                     int
	unknown                      int // failed + quarantined
	failed, quarantined, refused int // refused: among failed
}

func tallyOwned[T any](votes []nodeResult[T]) ownedTally[T] {
	var t ownedTally[T]
	for _, v := range votes {
		switch {
		case !answered(v.err):
			t.unknown++
			t.failed++
			if errors.Is(v.err, ErrRefused) {
				t.refused++
			}
		case !v.counted:
			t.unknown++
			t.quarantined++
		case v.err == nil:
			t.ok = append(t.ok, v.val)
		case errors.Is(v.err, ErrTokenMismatch):
			t.mismatch++
		}
	}
	return t
}

func (t ownedTally[T]) unavailable(r *Redlock) error {
	return r.quorumError(t.failed, t.quarantined, t.refused)
}

// majorityValue is the value most of vs carry, by fence (the highest fence
// on a tie). After a grant, a majority carries the grant's fence; a node that
// granted too late to be counted may carry its own.
func majorityValue(vs []lockValue) lockValue {
	count := make(map[int64]int, len(vs))
	best := vs[0]
	for _, v := range vs {
		count[v.fence]++
		if c, b := count[v.fence], count[best.fence]; c > b || (c == b && v.fence > best.fence) {
			best = v
		}
	}
	return best
}

// heldRemaining is how long until fewer than a majority of the nodes that
// answered "held" still hold the key: the quorum-th longest remaining TTL,
// or the shortest when fewer than a quorum said held.
func (r *Redlock) heldRemaining(held []time.Duration) time.Duration {
	slices.Sort(held)
	slices.Reverse(held)
	return held[min(r.quorum, len(held))-1]
}
