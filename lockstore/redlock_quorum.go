package lockstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// QuorumError is the ErrUnavailable a Redlock returns when too many nodes
// failed, or are quarantined, for a majority to be possible. Its message is
// fit for a client: it names counts, not addresses, except NodeList, which
// the operator needs in every answer to act on it.
type QuorumError struct {
	Nodes       int // nodes in the Redlock
	Quorum      int // votes needed: Nodes/2 + 1
	Failed      int // nodes that did not answer in time
	Quarantined int // nodes that answered but are quarantined after a restart
	Refused     int // nodes that answered but refuse writes (ErrRefused)
	// NodeList, when not empty, says why nodes count for no one: they
	// serve another node list than this gateway's, or none yet
	// (redlock_set.go). It names node addresses: it is for the operator.
	NodeList string
}

func (e *QuorumError) Error() string { return ErrUnavailable.Error() + ": " + e.QuorumDetail() }

// QuorumDetail says why no majority was possible, in words fit for a
// problem detail, naming each reason once: "3 of 5 Redlock nodes did not
// answer; a majority of 3 is impossible", "3 of 5 Redlock nodes are
// quarantined after a restart; …".
func (e *QuorumError) QuorumDetail() string {
	if e.NodeList != "" {
		return e.NodeList
	}
	var parts []string
	if e.Failed > 0 {
		parts = append(parts, fmt.Sprintf("%d did not answer", e.Failed))
	}
	if e.Quarantined > 0 {
		parts = append(parts, fmt.Sprintf("%d %s quarantined after a restart until every lease %s may have held has expired (see /readyz for when)",
			e.Quarantined, plural(e.Quarantined, "is", "are"), plural(e.Quarantined, "it", "they")))
	}
	if e.Refused > 0 {
		parts = append(parts, fmt.Sprintf("%d %s writes (out of memory, read-only or similar: see the node's log)", e.Refused, plural(e.Refused, "refuses", "refuse")))
	}
	if len(parts) == 0 {
		parts = append(parts, "0 did not answer")
	}
	// "3 did not answer" → "3 of 5 Redlock nodes did not answer".
	count, rest, _ := strings.Cut(parts[0], " ")
	parts[0] = fmt.Sprintf("%s of %d Redlock nodes %s", count, e.Nodes, rest)
	return strings.Join(parts, " and ") + fmt.Sprintf("; a majority of %d is impossible", e.Quorum)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Is makes errors.Is(err, ErrUnavailable) true, and errors.Is(err,
// ErrRefused) when nodes refusing writes are part of the reason.
func (e *QuorumError) Is(target error) bool {
	return target == ErrUnavailable || (target == ErrRefused && e.Refused > 0)
}

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
