package lockstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/lockgateway/lockgateway/internal/sleep"
)

// Semaphores on Redlock. A semaphore of limit L is L slots, and a permit
// is one slot held on a majority of nodes, under the rules of a lock's
// lease (attempt ids, discard of a failed round, release of what was read,
// extends that only lengthen, quarantine, the fence
// write-back): each slot has at most one holder by the lock's argument, so
// a key has at most L. docs/safety.md, "Semaphores", has the argument and
// why "a majority of nodes each below L" would not be safe.
//
// A round asks every node for one slot: on the first try a random one;
// then the slot the token already holds somewhere (a retry), or the slot
// most nodes reported free. A round where no slot can have a majority
// (a majority of nodes full, or all slots of theirs held) is "full".

var _ Semaphores = (*Redlock)(nil)

// SemAcquire implements Semaphores. It waits, like Acquire, without a
// queue.
func (r *Redlock) SemAcquire(ctx context.Context, key string, req PermitRequest) (Permit, error) {
	if err := checkPermit(key, req); err != nil {
		return Permit{}, err
	}
	if err := ctx.Err(); err != nil {
		return Permit{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	digest := digestHex(req.Token)
	p, err := r.semRounds(ctx, key, digest, req)
	if _, full := errors.AsType[*FullError](err); !full || req.Wait <= 0 {
		return p, err
	}
	wake, stop := r.listen(ctx, semChannel(key))
	defer stop()
	// retryUntil speaks of leases; a full semaphore is its "held".
	var last error
	_, err = retryUntil(ctx, AcquireRequest{Wait: req.Wait}, wake, func() (Lease, error) {
		p, last = r.semRounds(ctx, key, digest, req)
		if full, ok := errors.AsType[*FullError](last); ok {
			return Lease{}, &HeldError{Remaining: full.Remaining}
		}
		return Lease{}, last
	})
	if _, held := errors.AsType[*HeldError](err); held {
		return Permit{}, last
	}
	return p, err
}

// semRounds runs rounds until one is decisive, as acquireRounds does.
func (r *Redlock) semRounds(ctx context.Context, key, digest string, req PermitRequest) (Permit, error) {
	slot := 1 + rand.N(req.Limit)
	for attempt := 1; ; attempt++ {
		p, next, err := r.semOnce(ctx, key, digest, req, slot)
		if next == 0 || attempt == redlockAttempts {
			return p, err
		}
		// A split vote on the same slot pauses, as for a lock; so does a
		// move after the first, since two requests of one token at once
		// (a client's retry while the first is in flight) can each find
		// the other's slot and swap.
		if next == slot || attempt > 1 {
			pause := time.Millisecond + rand.N(min(5*time.Millisecond<<(attempt-1), 40*time.Millisecond))
			if !sleep.For(ctx, pause) {
				return Permit{}, err
			}
		}
		slot = next
	}
}

// semOnce runs one round for slot under a fresh attempt id. next, when not
// 0, is the slot to try in another round; err is then what to answer if
// there is none.
func (r *Redlock) semOnce(ctx context.Context, key, digest string, req PermitRequest, slot int) (_ Permit, next int, _ error) {
	start := time.Now()
	a := semArgs{digest: digest, ttl: req.TTL, owner: req.Owner, limit: req.Limit, slot: slot,
		seed: start.UnixMicro(), attempt: NewToken(), publish: publishAll}
	votes := fanOut(ctx, r, nil, func(ctx context.Context, _ int, n *redlockNode) (semResult, error) {
		return nodeSemAcquire(ctx, n.semGrant, key, a)
	})

	var granted []int
	var full []time.Duration // nodes with no free slot: time until one frees
	refusedSlot, failed, quarantined, refused := 0, 0, 0, 0
	var mismatch []semResult
	freeVotes := make(map[int]int) // slot → nodes that have it free
	elsewhere := make(map[int]int) // slot → nodes where the token holds it
	for i, v := range votes {
		vote := "granted"
		switch {
		case v.err != nil:
			failed++
			if vote = failedVote(v.err); vote == "refused" {
				refused++
			}
		case !v.counted:
			quarantined++
			vote = "quarantined"
		case v.val.code == semNew || v.val.code == semRenewed:
			granted = append(granted, i)
		case v.val.code == semMismatch:
			mismatch = append(mismatch, v.val)
			vote = "held"
		case v.val.code == semElsewise:
			elsewhere[v.val.slot]++
			vote = "held"
		default:
			vote = "held"
			refusedSlot++
			if v.val.freeCount == 0 {
				full = append(full, v.val.remaining)
			}
			for _, s := range v.val.free {
				freeVotes[s]++
			}
		}
		if r.onVote != nil {
			r.onVote(r.nodes[i].addr, vote)
		}
	}

	if ctx.Err() == nil && len(granted) >= r.quorum {
		if p, ok := r.semConfirm(ctx, key, a, req, votes, granted, start); ok {
			return p, 0, nil
		}
	}
	r.semDiscard(ctx, key, a, votes)

	answered := len(granted) + refusedSlot + len(mismatch)
	for _, c := range elsewhere {
		answered += c
	}
	fullErr := &FullError{Limit: req.Limit}
	if len(full) > 0 {
		fullErr.Remaining = r.heldRemaining(full)
	}
	switch {
	case ctx.Err() != nil:
		return Permit{}, 0, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	case len(elsewhere) > 0:
		// The token holds a permit: re-grant that one, the slot most
		// nodes know it by. If no round settles it, the outcome is
		// unknown, as after a timeout: the client retries with its token.
		return Permit{}, mostVoted(elsewhere), fmt.Errorf("%w: the token's permit is on different slots of different nodes; retry with the same token", ErrUnavailable)
	case answered < r.quorum:
		return Permit{}, 0, r.quorumError(failed, quarantined, refused)
	case len(mismatch) >= r.quorum || (len(mismatch) > 0 && len(mismatch)+len(full) >= r.quorum):
		m := mismatch[0]
		return Permit{}, 0, &LimitMismatchError{Limit: m.limit, Remaining: m.remaining}
	case len(full) >= r.quorum:
		return Permit{}, 0, fullErr
	}
	if len(freeVotes) > 0 {
		return Permit{}, mostVoted(freeVotes), fullErr
	}
	if len(granted) > 0 { // granted by a majority too slowly, or a split vote
		return Permit{}, slot, fmt.Errorf("%w: redlock could not confirm a majority within the permit's validity", ErrUnavailable)
	}
	return Permit{}, 0, fullErr
}

// mostVoted is the slot with the most votes, a random one on a tie, so
// gateways that saw the same free slots spread out.
func mostVoted(votes map[int]int) int {
	best, n, ties := 0, 0, 0
	for s, c := range votes {
		switch {
		case c > n:
			best, n, ties = s, c, 1
		case c == n:
			ties++
			if rand.N(ties) == 0 {
				best = s
			}
		}
	}
	return best
}

// semConfirm picks the permit's fence and writes it back where it differs,
// as confirmGrant does for a lease: the grant stands only if a majority of
// counted nodes carry the fence within the validity.
//
// The fence is pickFence's, shared with locks: every round of one token
// should pick the same one, twins included; confirmation alone makes sure
// two permits never share one, whatever was picked.
//
// Confirmation: a node confirms the fence when its value carries it
// marked confirmed (an earlier write-back of the token's), else when the
// write-back marks it there (so a new permit always writes back). When a
// majority of the re-granted values already carry the fence, the permit
// is that fence's (it was confirmed when a majority first carried it), and
// the write-back relabels the other values only. Otherwise the write-back
// confirms the fence where the value carries it already (with the counter
// at it or past it) or finds the counter below it (and sets it) or at it,
// set by this token: the counter names the token that set it, so twins
// confirm one fence on the same nodes, while two tokens confirmed with one
// fence would have set one counter to it on a node their majorities share,
// which the write-back refuses. docs/safety.md, "Semaphores" → "Twins"
// and "Retries", has the argument.
func (r *Redlock) semConfirm(ctx context.Context, key string, a semArgs, req PermitRequest,
	votes []nodeResult[semResult], granted []int, start time.Time,
) (Permit, bool) {
	picked := make([]fenceVote, 0, len(granted))
	renewed := 0
	for _, i := range granted {
		v := votes[i].val
		if v.code == semRenewed {
			renewed++
		}
		picked = append(picked, fenceVote{v.value.fence, v.code == semRenewed, makerOf(v.value.field), v.value.confirmed})
	}
	fence, kept := pickFence(picked, r.quorum)

	owner := req.Owner
	for _, i := range granted {
		if votes[i].val.value.fence == fence {
			owner = votes[i].val.value.owner // a re-grant keeps the stored owner
			break
		}
	}

	confirmed := 0
	rewrite := make([]bool, len(votes))
	for i, v := range votes {
		if v.err != nil || (v.val.code != semNew && v.val.code != semRenewed) {
			continue
		}
		// A value that carries the fence confirmed counts as it is only
		// when the round keeps the permit's fence; otherwise it may be a
		// minority's copy of a permit the token released, and the
		// write-back checks the node's counter (docs/safety.md,
		// "Semaphores", Fences).
		if kept && v.val.value.fence == fence && v.val.value.confirmed {
			if v.counted {
				confirmed++
			}
			continue
		}
		rewrite[i] = true
	}
	margin := strconv.FormatInt(FenceMargin.Milliseconds(), 10)
	keepArg := ""
	if kept {
		keepArg = "1"
	}
	for pass := 1; confirmed < r.quorum; pass++ {
		f := strconv.FormatInt(fence, 10)
		raised := fanOut(ctx, r, rewrite, func(ctx context.Context, _ int, n *redlockNode) (raiseResult, error) {
			v, err := semRaiseScript.Run(ctx, n.semGrant, []string{semPermitsKey(key), semExpiryKey(key), semFenceKey(key)},
				a.digest, a.attempt, f, margin, a.slot, keepArg).Int64Slice()
			if err != nil {
				return raiseResult{}, redisErr(err)
			}
			return parseRaise(v)
		})
		// The counters other permits' rounds moved past the fence since
		// the votes: the highest, and whether this token set it.
		var past raiseResult
		for i, v := range raised {
			if !rewrite[i] || v.err != nil {
				continue
			}
			switch {
			case v.val.code == raiseDone && v.counted:
				confirmed++
			case v.val.code == raisePast && v.val.counter > past.counter:
				past = v.val
			}
		}
		if confirmed >= r.quorum || kept || past.counter == 0 || pass == semRaisePasses || ctx.Err() != nil {
			break
		}
		// Raise the fence above them, on every node that granted, rather
		// than give the round up: every round of a busy semaphore would
		// lose the same race. A counter this token set is a twin's new
		// fence: take it as it is, so twins still agree. The new fence is
		// confirmed as any other, by counters this token sets.
		fence = past.counter
		if !past.mine {
			fence++
		}
		confirmed = 0
		for i, v := range votes {
			rewrite[i] = v.err == nil && (v.val.code == semNew || v.val.code == semRenewed)
		}
	}
	validity := req.TTL - time.Since(start) - drift(req.TTL)
	if confirmed < r.quorum || validity <= 0 || ctx.Err() != nil {
		return Permit{}, false
	}
	return Permit{Key: key, Token: req.Token, Owner: owner, Limit: req.Limit, Fence: fence,
		Granted: req.TTL, ExpiresAt: start.Add(req.TTL - drift(req.TTL)), Renewed: renewed >= r.quorum}, true
}

// semRaisePasses is how many write-backs a round makes at most, each with a
// fence above the counters that refused the one before.
const semRaisePasses = 3

// raiseResult is a node's answer to sem_raise.lua.
type raiseResult struct {
	code    int64 // raiseDone, raisePast, or 0: the round does not hold the slot here
	counter int64 // raisePast: the node's counter
	mine    bool  // raisePast: this token set it
}

const (
	raiseDone = 1
	raisePast = 2
)

func parseRaise(v []int64) (raiseResult, error) {
	switch {
	case len(v) == 1 && v[0] != raisePast:
		return raiseResult{code: v[0]}, nil
	case len(v) == 3 && v[0] == raisePast:
		return raiseResult{code: raisePast, counter: v[1], mine: v[2] == 1}, nil
	}
	return raiseResult{}, fmt.Errorf("%w: unexpected sem_raise.lua reply %v", ErrUnavailable, v)
}

// quorumFence is the fence that at least quorum of fences are, if any.
func quorumFence(fences []int64, quorum int) (int64, bool) {
	count := make(map[int64]int, len(fences))
	for _, f := range fences {
		if count[f]++; count[f] >= quorum {
			return f, true
		}
	}
	return 0, false
}

// semDiscard takes a failed round out of every node it may hold, as
// discard does for a lease.
func (r *Redlock) semDiscard(ctx context.Context, key string, a semArgs, votes []nodeResult[semResult]) {
	detached := context.WithoutCancel(ctx)
	del := func(n *redlockNode) {
		nctx, cancel := context.WithTimeout(detached, r.nodeTimeout)
		defer cancel()
		err := semDiscardScript.Run(nctx, n.client, []string{semPermitsKey(key), semExpiryKey(key)}, a.digest, a.attempt, semChannel(key)).Err()
		r.observe(detached, n, redisErr(err))
	}
	var wg sync.WaitGroup
	for i, n := range r.nodes {
		switch v := votes[i]; {
		case errors.Is(v.err, errNodeDown):
		case v.err != nil:
			r.background(func() { del(n) })
		case v.val.code == semNew || v.val.code == semRenewed:
			wg.Go(func() { del(n) })
		}
	}
	wg.Wait()
}

// SemExtend implements Semaphores, with Extend's rules: only ever
// lengthens on a node, and succeeds when a majority extended one slot.
func (r *Redlock) SemExtend(ctx context.Context, key, token string, ttl time.Duration) (Permit, error) {
	if err := checkExtend(key, token, ttl); err != nil {
		return Permit{}, err
	}
	digest := digestHex(token)
	start := time.Now()
	votes := fanOut(ctx, r, nil, func(ctx context.Context, _ int, n *redlockNode) (semValue, error) {
		return nodeSemExtend(ctx, n.semGrant, key, digest, ttl, true, publishAll)
	})
	t := tallyOwned(votes)
	if err := ctx.Err(); err != nil {
		return Permit{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	// Only the slot most nodes extended counts (another is a leftover).
	bySlot := make(map[int]int)
	for _, v := range t.ok {
		bySlot[v.slot]++
	}
	slot := mostVoted(bySlot)
	var ok []semValue
	for _, v := range t.ok {
		if v.slot == slot {
			ok = append(ok, v)
		}
	}
	if ttl == 0 {
		for _, v := range ok {
			if ttl == 0 || v.length < ttl {
				ttl = v.length
			}
		}
	}
	validity := ttl - time.Since(start) - drift(ttl)
	switch {
	case len(ok) >= r.quorum && validity > 0:
		v := majoritySemValue(ok)
		return Permit{Key: key, Token: token, Owner: v.owner, Limit: v.limit, Fence: v.fence,
			Granted: ttl, ExpiresAt: start.Add(ttl - drift(ttl))}, nil
	case len(ok) >= r.quorum:
		return Permit{}, fmt.Errorf("%w: redlock extended the permit on a majority too slowly to vouch for it", ErrUnavailable)
	case t.mismatch >= r.quorum:
		return Permit{}, ErrTokenMismatch
	case len(ok)+t.unknown < r.quorum:
		return Permit{}, ErrNotHeld
	}
	return Permit{}, t.unavailable(r)
}

// majoritySemValue is the value most of vs carry, by fence (the highest on
// a tie), as majorityValue.
func majoritySemValue(vs []semValue) semValue {
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

// SemRelease implements Semaphores with Release's two steps: read every
// node, and delete only when the token holds a majority by that read, on
// each node only the value read (its attempt field unchanged).
func (r *Redlock) SemRelease(ctx context.Context, key, token string) error {
	if err := checkToken(key, token, MinTTL); err != nil {
		return err
	}
	if err := r.set.refusing(); err != nil {
		return err
	}
	digest := digestHex(token)
	reads := fanOut(ctx, r, nil, func(ctx context.Context, _ int, n *redlockNode) (semValue, error) {
		return nodeSemRead(ctx, n.client, key, digest)
	})
	t := tallyOwned(reads)
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	case t.mismatch >= r.quorum:
		return ErrTokenMismatch
	case len(t.ok)+t.unknown < r.quorum:
		return ErrNotHeld
	case len(t.ok) < r.quorum:
		return t.unavailable(r)
	}
	held := make([]bool, len(reads))
	for i, v := range reads {
		held[i] = v.err == nil
	}
	dels := fanOut(ctx, r, held, func(ctx context.Context, i int, n *redlockNode) (struct{}, error) {
		v := reads[i].val
		for range releaseReads {
			err := nodeSemRelease(ctx, n.client, key, digest, publishAll, v)
			if !errors.Is(err, errMoved) {
				return struct{}{}, err
			}
			if v, err = nodeSemRead(ctx, n.client, key, digest); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, errMoved
	})
	deleted := 0
	for _, v := range dels {
		if v.err == nil && v.counted {
			deleted++
		}
	}
	if deleted >= r.quorum {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return fmt.Errorf("%w: redlock released the permit on %d of %d nodes; a majority of %d is needed", ErrUnavailable, deleted, len(r.nodes), r.quorum)
}

// SemInspect implements Semaphores: the permits held on a majority of the
// counted nodes (the same slot and token), each with the smallest time
// left among them less the drift allowance; ErrNotHeld when no permit can
// have a majority even counting the nodes that did not answer.
func (r *Redlock) SemInspect(ctx context.Context, key string) (SemaphoreState, error) {
	st, _, err := r.semInspect(ctx, key)
	return st, err
}

// semInspect is SemInspect, and how much later than its ExpiresAt any
// permit's last node may let it go (watchLate, the largest over permits).
func (r *Redlock) semInspect(ctx context.Context, key string) (SemaphoreState, time.Duration, error) {
	if err := r.set.refusing(); err != nil {
		return SemaphoreState{}, 0, err
	}
	type read struct {
		limit int
		vs    []semValue
	}
	start := time.Now()
	votes := fanOut(ctx, r, nil, func(ctx context.Context, _ int, n *redlockNode) (read, error) {
		limit, vs, err := nodeSemInspect(ctx, n.client, key)
		return read{limit, vs}, err
	})
	if err := ctx.Err(); err != nil {
		return SemaphoreState{}, 0, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	type permitID struct {
		slot   int
		digest string
	}
	found := make(map[permitID][]semValue)
	limits := make(map[int]int)
	unknown, failed, quarantined := 0, 0, 0
	for _, v := range votes {
		switch {
		case v.err != nil && !answered(v.err):
			unknown++
			failed++
		case !v.counted:
			unknown++
			quarantined++
		case v.err == nil:
			limits[v.val.limit]++
			for _, sv := range v.val.vs {
				id := permitID{sv.slot, sv.digest}
				found[id] = append(found[id], sv)
			}
		}
	}
	st := SemaphoreState{Key: key, Limit: mostVoted(limits)}
	var late time.Duration
	best := 0
	for _, vs := range found {
		best = max(best, len(vs))
		if len(vs) < r.quorum {
			continue
		}
		left, longest := vs[0].left, vs[0].left
		for _, v := range vs {
			left = min(left, v.left)
			longest = max(longest, v.left)
		}
		v := majoritySemValue(vs)
		left = max(left-drift(left), 0)
		p := Permit{Key: key, Owner: v.owner, Limit: st.Limit, Fence: v.fence,
			Granted: v.length, Left: left, ExpiresAt: start.Add(left)}
		st.Holders = append(st.Holders, p)
		late = max(late, watchLate(start, longest, p.ExpiresAt))
	}
	if len(st.Holders) > 0 {
		sortHolders(st.Holders)
		return st, late, nil
	}
	if best+unknown < r.quorum {
		return SemaphoreState{}, 0, ErrNotHeld
	}
	return SemaphoreState{}, 0, r.quorumError(failed, quarantined, 0)
}
