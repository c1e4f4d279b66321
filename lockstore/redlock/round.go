package redlock

import (
	"context"
	"errors"
	"slices"
	"sync"
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
	what   string // "lease" or "permit", for messages
	fence  func(V) int64
	length func(V) time.Duration // as last granted or extended
	slot   func(V) int           // a lock's: 0, its one
}

var (
	lockValues = valueKind[script.LockValue]{
		what:   "lease",
		fence:  func(v script.LockValue) int64 { return v.Fence },
		length: func(v script.LockValue) time.Duration { return v.Length },
		slot:   func(script.LockValue) int { return 0 },
	}
	semValues = valueKind[script.SemValue]{
		what:   "permit",
		fence:  func(v script.SemValue) int64 { return v.Fence },
		length: func(v script.SemValue) time.Duration { return v.Length },
		slot:   func(v script.SemValue) int { return v.Slot },
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
// sem_confirm.lua's code (script.ConfirmMade, script.ConfirmJoined, or another).
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
		if rewrite[i] && v.err == nil && (v.val == script.ConfirmMade || v.val == script.ConfirmJoined) && v.counted && values[i].granting() {
			g.confirmed[i] = true
		}
	}
	return g
}

// ownerOr is the owner a grant reports: the stored owner of a value with
// the fence (a renewal keeps it), else asked.
func (g roundGrant) ownerOr(asked string) string {
	if g.hasOwner {
		return g.owner
	}
	return asked
}

// confirmVotes is G1 after a round's votes for a lock or a permit
// (confirmRound, with confirm running confirm.lua or sem_confirm.lua on
// one node: its code, and for script.ConfirmMade the value as it left it). ok:
// the round stands, q granting nodes carrying its fence confirmed within
// the validity (ttl − elapsed − drift, elapsed from start, before the
// first vote). When it does not, made holds, by node, the lease or permit
// this round alone made there (C's "made"), as it was left: the round's
// to delete as read (cleanup).
func confirmVotes[V any](ctx context.Context, r *Store, values []roundValue, rounds []string, ttl time.Duration, start time.Time,
	confirm func(ctx context.Context, i int, n *redlockNode, maker string, fence int64) (int64, V, error),
) (_ roundGrant, ok bool, made []*V) {
	made = make([]*V, len(values))
	g := r.confirmRound(ctx, values, rounds, func(ctx context.Context, i int, n *redlockNode, maker string, fence int64) (int64, error) {
		code, v, err := confirm(ctx, i, n, maker, fence)
		if code == script.ConfirmMade && err == nil {
			made[i] = &v
		}
		return code, err
	})
	validity := ttl - time.Since(start) - script.Drift(ttl)
	if !r.q().all(g.confirmed) || validity <= 0 || ctx.Err() != nil {
		return roundGrant{}, false, made
	}
	return g, true, nil
}

// cleanup withdraws what a failed round left (docs/safety.md, G1), for a
// lock or a permit: only for liveness, so that other rounds need not wait
// for it to expire. Where the round alone made a lease or permit (made[i],
// C's "made") it deletes it as the confirmation left it (release: R, not
// if anything wrote to it since); elsewhere it withdraws the round's
// provisional value (discard: W).
type cleanup[R, V any] struct {
	voted   func(R) bool // the vote made a new, provisional value
	release func(ctx context.Context, n *redlockNode, v V) error
	discard func(ctx context.Context, n *redlockNode) error
}

// run runs the clean-up of a round whose votes were votes, under fresh
// contexts (the caller's may be why the round failed). It waits for the
// nodes where the round made a value, and goes on in the background for
// those that did not answer: their script may still land, before or after
// the withdrawal (then that value expires on its own, within the
// provisional TTL). No confirmation of the round can land after this:
// fanOut returned only once every deadline had passed.
func (c cleanup[R, V]) run(ctx context.Context, r *Store, votes []nodeResult[R], made []*V) {
	detached := context.WithoutCancel(ctx)
	del := func(i int, n *redlockNode) {
		nctx, cancel := context.WithTimeout(detached, r.nodeTimeout)
		defer cancel()
		var err error
		if made != nil && made[i] != nil {
			// Changed since (errMoved), gone or another's: a node's answer.
			if err = c.release(nctx, n, *made[i]); answered(err) || errors.Is(err, script.ErrMoved) {
				err = nil
			}
		} else {
			err = c.discard(nctx, n)
		}
		r.observe(detached, n, script.RedisErr(err))
	}
	var wg sync.WaitGroup
	for i, n := range r.nodes {
		switch v := votes[i]; {
		case errors.Is(v.err, errNodeDown):
			// Never asked: nothing of this round's there.
		case v.err != nil:
			r.background(func() { del(i, n) })
		case c.voted(v.val) || (made != nil && made[i] != nil):
			wg.Go(func() { del(i, n) })
		}
	}
	wg.Wait()
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
