package redlock

import (
	"context"
	"slices"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

// Rule G1 of docs/safety.md ("The rules"), for locks and permits alike: a
// round's fence from its granting nodes' values, and its confirmations.
// A permit is a lock of one slot (docs/safety.md, "Semaphores"); only the
// script that confirms differs (confirm.lua, sem_confirm.lua).

// valueKind reads, for the code locks and permits share, the fields their
// values (script.LockValue, script.SemValue) have in common: a permit is a
// lock of one slot, but Go's generics reach no fields.
type valueKind[V any] struct {
	fence  func(V) int64
	length func(V) time.Duration // as last granted or extended
}

var (
	lockValues = valueKind[script.LockValue]{
		fence:  func(v script.LockValue) int64 { return v.Fence },
		length: func(v script.LockValue) time.Duration { return v.Length },
	}
	semValues = valueKind[script.SemValue]{
		fence:  func(v script.SemValue) int64 { return v.Fence },
		length: func(v script.SemValue) time.Duration { return v.Length },
	}
)

// roundValue is one node's answer to a round's vote, as G1 reads it.
type roundValue struct {
	has       bool   // the node answered a value of the round's token
	counted   bool   // and counted for the vote (not quarantined)
	fence     int64  // the value's fence
	confirmed bool   // it carries its fence confirmed
	maker     string // the round that made it (makerOf)
	owner     string
	floor     int64 // the vote the node would cast now (permits; 0: none)
}

// granting: the node counts for the round (G1's granting nodes).
func (v roundValue) granting() bool { return v.has && v.counted }

// confirmFunc runs C(maker, fence) on node i and answers confirm.lua's or
// sem_confirm.lua's code (confirmMade, confirmJoined, or another).
type confirmFunc func(ctx context.Context, i int, n *redlockNode, maker string, fence int64) (int64, error)

// roundGrant is what G1 decided for a round.
type roundGrant struct {
	fence     int64
	renewal   bool   // a renewal (200): the fence q granting nodes carry confirmed
	owner     string // the stored owner of a value with the fence,
	hasOwner  bool   // if any
	confirmed []bool // by node: granting nodes that carry the fence confirmed, still counted
}

// confirmRound is G1 after the votes: it picks the fence (roundFence),
// then runs C on every node that answered a value of the token and does
// not carry the fence confirmed already, quarantined ones too, so that
// they hold the lease when they count again; only granting nodes still
// counted are counted. rounds are the ids of the caller's rounds so far: a
// lease an earlier one confirmed before it failed is the call's new grant,
// not a renewal.
func (r *Store) confirmRound(ctx context.Context, values []roundValue, rounds []string, confirm confirmFunc) roundGrant {
	var g roundGrant
	g.fence, g.renewal = roundFence(values, r.q())
	g.confirmed = make([]bool, len(values))
	for _, v := range values {
		if v.granting() && v.fence == g.fence {
			if !g.hasOwner {
				g.owner, g.hasOwner = v.owner, true // a renewal keeps the stored owner
			}
			// An earlier round of this call confirmed the lease before it
			// failed: the call's new grant, not a renewal. Only confirmed
			// values say so: this round's own provisional value may carry
			// the same fence by chance (a node's counter + 1, as the
			// simulator found: a renewal answered 201 with the old fence,
			// below a later holder's).
			if g.renewal && v.confirmed && slices.Contains(rounds, v.maker) {
				g.renewal = false
			}
		}
	}
	rewrite := make([]bool, len(values))
	for i, v := range values {
		switch {
		case !v.has:
		case v.fence == g.fence && v.confirmed:
			g.confirmed[i] = v.counted
		default:
			rewrite[i] = true
		}
	}
	if r.q().all(g.confirmed) {
		return g
	}
	done := fanOut(ctx, r, rewrite, func(ctx context.Context, i int, n *redlockNode) (int64, error) {
		return confirm(ctx, i, n, values[i].maker, g.fence)
	})
	for i, v := range done {
		// Only a node that counted for the votes, and counts still: the
		// fence was picked from the former (docs/safety.md, G1).
		if rewrite[i] && v.err == nil && (v.val == confirmMade || v.val == confirmJoined) && v.counted && values[i].granting() {
			g.confirmed[i] = true
		}
	}
	return g
}

// roundFence is a round's fence from its granting nodes' values (G1): the
// confirmed fence a quorum of them carry, if any (a renewal: the lease
// as it was answered), else the highest fence among them and their nodes'
// floors (permits, R3), which is above every earlier holder's
// (docs/safety.md, "Fences and retries", "Fences of permits").
func roundFence(values []roundValue, q quorums) (fence int64, renewal bool) {
	confirmed := make(map[int64][]bool, 1) // fence → the nodes carrying it confirmed
	for i, v := range values {
		if !v.granting() {
			continue
		}
		fence = max(fence, v.fence)
		if v.confirmed {
			if confirmed[v.fence] == nil {
				confirmed[v.fence] = make([]bool, len(values))
			}
			confirmed[v.fence][i] = true
		}
	}
	for f, at := range confirmed {
		if q.all(at) {
			return f, true
		}
	}
	for _, v := range values {
		if v.granting() {
			fence = max(fence, v.floor)
		}
	}
	return fence, false
}

// confirmResult codes, of confirm.lua and sem_confirm.lua.
const (
	confirmMade   = 1 // this round made the value a lease
	confirmJoined = 3 // another round had; its fence is now this round's
)
