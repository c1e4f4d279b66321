package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/lockgateway/lockgateway/lockstore/internal/wait"
)

// Semaphores on Redlock. A semaphore of limit L is L slots, and a permit
// is one slot held on a majority of nodes under the rules of a lock's
// lease (provisional values, one confirmation, release of what was read,
// extends that only lengthen, quarantine), each slot's fences ≡ the slot
// (mod L): each slot has at most one holder by the lock's argument, so a
// key has at most L. docs/safety.md, "Semaphores", has the argument and
// why "a majority of nodes each below L" would not be safe.
//
// A round asks every node for one slot: on the first try a random one;
// then the slot the token already holds somewhere (a retry), or the slot
// most nodes reported free. A round where no slot can have a majority
// (a majority of nodes full, or all slots of theirs held) is "full".

var _ lockstore.Semaphores = (*Store)(nil)

// SemAcquire implements Semaphores. It waits, like Acquire, without a
// queue (wait.Raced).
func (r *Store) SemAcquire(ctx context.Context, key string, req lockstore.PermitRequest) (lockstore.Permit, error) {
	if err := lockstore.CheckPermit(key, req); err != nil {
		return lockstore.Permit{}, err
	}
	if err := ctx.Err(); err != nil {
		return lockstore.Permit{}, fmt.Errorf("%w: %w", lockstore.ErrUnavailable, err)
	}
	digest := script.DigestHex(req.Token)
	p, err := r.semRounds(ctx, key, digest, req)
	if _, full := errors.AsType[*lockstore.FullError](err); !full || req.Wait <= 0 {
		return p, err
	}
	wake, stop := r.listen(ctx, script.SemChannel(key))
	defer stop()
	try := func() wait.Try {
		p, err = r.semRounds(ctx, key, digest, req)
		return raced(err)
	}
	if werr := wait.For(ctx, time.Now().Add(req.Wait), wake, wait.Raced, try); werr != nil {
		return lockstore.Permit{}, werr
	}
	return p, err
}

// semRounds runs rounds until one is decisive, as acquireRounds does.
func (r *Store) semRounds(ctx context.Context, key, digest string, req lockstore.PermitRequest) (lockstore.Permit, error) {
	slot := firstSlot(digest, req.Limit)
	var rounds []string // this call's round ids, as acquireCall.rounds
	for attempt := 1; ; attempt++ {
		p, next, err := r.semOnce(ctx, key, digest, req, slot, &rounds)
		if next == 0 || attempt == redlockAttempts {
			return p, err
		}
		// A split vote on the same slot pauses, as for a lock; so does a
		// move after the first, since two requests of one token at once
		// (a client's retry while the first is in flight) can each find
		// the other's slot and swap.
		if next == slot || attempt > 1 {
			if !pause(ctx, attempt) {
				return lockstore.Permit{}, err
			}
		}
		slot = next
	}
}

// firstSlot is the slot a token's first round asks for: one the digest
// picks, so that twins (one token's acquires at once) ask for the same
// slot and meet on every node as a lock's rounds do, while tokens spread
// over the slots. Twins that asked for two slots split the nodes between
// them; the one that lost retried elsewhere with fresh votes and could be
// answered another fence than its twin (TestRedlockSemTwinsShareOnePermit,
// one set in a hundred).
func firstSlot(digest string, limit int) int {
	n, _ := strconv.ParseUint(digest[:15], 16, 64)
	return 1 + int(n%uint64(limit))
}

// semOnce runs one round for slot under a fresh round id (G1). next, when
// not 0, is the slot to try in another round; err is then what to answer
// if there is none.
func (r *Store) semOnce(ctx context.Context, key, digest string, req lockstore.PermitRequest, slot int, rounds *[]string) (_ lockstore.Permit, next int, _ error) {
	if err := r.admit.enter(); err != nil {
		return lockstore.Permit{}, 0, err
	}
	var votes []nodeResult[script.SemResult]
	defer func() { r.admit.leave(congested(r, votes), time.Now()) }()
	start := time.Now()
	a := script.SemArgs{Digest: digest, Ttl: req.TTL, Owner: req.Owner, Limit: req.Limit, Slot: slot,
		Seed: start.UnixMicro(), Attempt: lockstore.NewToken(), Publish: script.PublishAll, Provisional: r.provisional(req.TTL)}
	*rounds = append(*rounds, a.Attempt)
	votes = fanOut(ctx, r, nil, func(ctx context.Context, _ int, n *redlockNode) (script.SemResult, error) {
		return script.SemAcquire(ctx, n.semWrites, key, a)
	})

	granted := make([]bool, len(votes)) // by node
	full := unheld(len(votes))          // nodes with no free slot: time until one frees
	fullAt := make([]bool, len(votes))
	answeredAt := make([]bool, len(votes)) // counted nodes that answered
	mismatchAt := make([]bool, len(votes))
	var mismatch []script.SemResult
	freeVotes := make(map[int]int) // slot → nodes that have it free
	elsewhere := make(map[int]int) // slot → nodes where the token holds it
	failed, quarantined, refused := countVotes(r, votes, func(i int, v script.SemResult) string {
		answeredAt[i] = true
		switch v.Code {
		case script.SemNew, script.SemRenewed:
			granted[i] = true
			return "granted"
		case script.SemMismatch:
			mismatch = append(mismatch, v)
			mismatchAt[i] = true
		case script.SemElsewise:
			elsewhere[v.Slot]++
		default:
			if v.FreeCount == 0 {
				full[i], fullAt[i] = v.Remaining, true
			}
			for _, s := range v.Free {
				freeVotes[s]++
			}
		}
		return "held"
	})

	var made []*script.SemValue // by node: a permit this round alone confirmed there
	if ctx.Err() == nil && r.q().all(granted) {
		p, ok, confirmed := r.semConfirm(ctx, key, a, req, votes, *rounds, start)
		if ok {
			return p, 0, nil
		}
		made = confirmed
	}
	r.semDiscard(ctx, key, a, votes, made)

	fullErr := &lockstore.FullError{Limit: req.Limit}
	if slices.Contains(fullAt, true) {
		fullErr.Remaining = r.heldRemaining(full)
	}
	switch {
	case ctx.Err() != nil:
		return lockstore.Permit{}, 0, fmt.Errorf("%w: %w", lockstore.ErrUnavailable, ctx.Err())
	case len(elsewhere) > 0:
		// The token holds a permit: re-grant that one, the slot most
		// nodes know it by. If no round settles it, the outcome is
		// unknown, as after a timeout: the client retries with its token.
		return lockstore.Permit{}, mostVoted(elsewhere), fmt.Errorf("%w: the token's permit is on different slots of different nodes; retry with the same token", lockstore.ErrUnavailable)
	case !r.q().all(answeredAt):
		return lockstore.Permit{}, 0, r.quorumError(failed, quarantined, refused)
	case r.q().any(mismatchAt) || (len(mismatch) > 0 && r.q().any(or(mismatchAt, fullAt))):
		m := mismatch[0]
		return lockstore.Permit{}, 0, &lockstore.LimitMismatchError{Limit: m.Limit, Remaining: m.Remaining}
	case r.q().any(fullAt):
		return lockstore.Permit{}, 0, fullErr
	}
	if len(freeVotes) > 0 {
		return lockstore.Permit{}, mostVoted(freeVotes), fullErr
	}
	if slices.Contains(granted, true) { // granted by a majority too slowly, or a split vote
		return lockstore.Permit{}, slot, fmt.Errorf("%w: redlock could not confirm a majority within the permit's validity", lockstore.ErrUnavailable)
	}
	return lockstore.Permit{}, 0, fullErr
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

// semConfirm is G1 for a permit round (confirmVotes, with
// sem_confirm.lua), as confirmGrant is for a lock's. A permit's values
// carry their node's floor (R3), which roundFence counts.
func (r *Store) semConfirm(ctx context.Context, key string, a script.SemArgs, req lockstore.PermitRequest,
	votes []nodeResult[script.SemResult], rounds []string, start time.Time,
) (_ lockstore.Permit, ok bool, made []*script.SemValue) {
	values := make([]roundValue, len(votes))
	for i, v := range votes {
		if v.err == nil && (v.val.Code == script.SemNew || v.val.Code == script.SemRenewed) {
			sv := v.val.Value
			values[i] = roundValue{has: true, counted: v.counted, fence: sv.Fence,
				confirmed: sv.Confirmed, maker: script.MakerOf(sv.Field), owner: sv.Owner, floor: v.val.Floor}
		}
	}
	g, ok, made := confirmVotes(ctx, r, values, rounds, req.TTL, start, func(ctx context.Context, i int, n *redlockNode, maker string, fence int64) (int64, script.SemValue, error) {
		return script.SemConfirm(ctx, n.semWrites, key, a.Digest, maker, fence, a.Slot, req.TTL)
	})
	if !ok {
		return lockstore.Permit{}, false, made
	}
	return lockstore.Permit{Key: key, Token: req.Token, Owner: g.ownerOr(req.Owner), Limit: req.Limit, Fence: g.fence,
		Granted: req.TTL, ExpiresAt: script.GrantEnd(start, req.TTL), Renewed: g.renewal}, true, nil
}

// semDiscard is G1's clean-up of a failed permit round (cleanup), with
// sem_release.lua and sem_discard.lua. Unlike a lock's, it runs on the
// node's client, not its batch, and a permit has no hold-at-least to
// honour (rule L is the lock's).
func (r *Store) semDiscard(ctx context.Context, key string, a script.SemArgs, votes []nodeResult[script.SemResult], made []*script.SemValue) {
	cleanup[script.SemResult, script.SemValue]{
		voted: func(v script.SemResult) bool { return v.Code == script.SemNew },
		release: func(ctx context.Context, n *redlockNode, v script.SemValue) error {
			return script.SemRelease(ctx, n.semWrites, key, a.Digest, script.PublishAll, v)
		},
		discard: func(ctx context.Context, n *redlockNode) error {
			return script.SemDiscard(ctx, n.client, key, a.Digest, a.Attempt)
		},
	}.run(ctx, r, votes, made)
}

// SemExtend implements Semaphores, with Extend's rules (extend): only
// ever lengthens on a node, and succeeds when a majority extended one
// slot.
func (r *Store) SemExtend(ctx context.Context, key, token string, ttl time.Duration) (lockstore.Permit, error) {
	v, granted, start, err := extend(ctx, r, semValues, semExtends, key, token, ttl)
	if err != nil {
		return lockstore.Permit{}, err
	}
	return semPermit(key, token, v, granted, start), nil
}

// semPermit is the permit an extend that began at start answers.
func semPermit(key, token string, v script.SemValue, granted time.Duration, start time.Time) lockstore.Permit {
	return lockstore.Permit{Key: key, Token: token, Owner: v.Owner, Limit: v.Limit, Fence: v.Fence,
		Granted: granted, ExpiresAt: script.GrantEnd(start, granted)}
}

// SemRelease implements Semaphores with Release's two steps: read every
// node, and delete only when the token holds a majority by that read, on
// each node only the value read (its attempt field unchanged).
func (r *Store) SemRelease(ctx context.Context, key, token string) error {
	if err := lockstore.CheckRelease(key, token); err != nil {
		return err
	}
	return r.semRelease(ctx, key, script.DigestHex(token), 0)
}

// SemForceRelease implements Forcer: SemRelease of the permit with fence,
// the digest of its holder taken from a read of every node in place of the
// caller's token's.
func (r *Store) SemForceRelease(ctx context.Context, key string, fence int64) (lockstore.Permit, error) {
	if err := lockstore.CheckForce(key, fence, true); err != nil {
		return lockstore.Permit{}, err
	}
	st, _, digests, err := r.semInspect(ctx, key)
	if err != nil {
		return lockstore.Permit{}, err
	}
	i := slices.IndexFunc(st.Holders, func(p lockstore.Permit) bool { return p.Fence == fence })
	if i < 0 {
		return lockstore.Permit{}, lockstore.ErrNotHeld
	}
	if err := r.semRelease(ctx, key, digests[fence], fence); err != nil {
		return lockstore.Permit{}, lockstore.ForcedErr(err)
	}
	p := st.Holders[i]
	p.Left, p.ExpiresAt = 0, time.Time{}
	return p, nil
}

// semRelease releases digest's permit on key (SemRelease).
// fence, when not 0 (a forced release), pins the permit: a node whose
// permit of digest has another fence is not released (review fix).
func (r *Store) semRelease(ctx context.Context, key, digest string, fence int64) error {
	if err := r.set.refusing(); err != nil {
		return err
	}
	read := func(ctx context.Context, n *redlockNode) (script.SemValue, error) {
		v, err := script.SemRead(ctx, n.client, key, digest)
		if err == nil && fence != 0 && v.Fence != fence {
			err = lockstore.ErrNotHeld
		}
		return v, err
	}
	reads := fanOut(ctx, r, nil, func(ctx context.Context, _ int, n *redlockNode) (script.SemValue, error) {
		return read(ctx, n)
	})
	_, err := deleteReads(ctx, r, semValues, reads, func(ctx context.Context, n *redlockNode, v script.SemValue) error {
		del := func(v script.SemValue) error {
			v.Forced = fence != 0 // only a forced release names the fence
			return script.SemRelease(ctx, n.semWrites, key, digest, script.PublishAll, v)
		}
		return deleteAsRead(v, del, func() (script.SemValue, error) { return read(ctx, n) })
	})
	return err
}

// SemInspect implements Semaphores: the permits held on a majority of the
// counted nodes (the same slot and token), each with the smallest time
// left among them less the drift allowance; ErrNotHeld when no permit can
// have a majority even counting the nodes that did not answer.
func (r *Store) SemInspect(ctx context.Context, key string) (lockstore.SemaphoreState, error) {
	st, _, err := r.SemInspectSpread(ctx, key)
	return st, err
}

// SemInspectSpread implements Spreader: SemInspect, and how much later
// than its ExpiresAt any permit's last node may let it go (watchLate, the
// largest over permits).
func (r *Store) SemInspectSpread(ctx context.Context, key string) (lockstore.SemaphoreState, time.Duration, error) {
	st, late, _, err := r.semInspect(ctx, key)
	return st, late, err
}

// semInspect is SemInspectSpread, and the digest of each holder by fence.
func (r *Store) semInspect(ctx context.Context, key string) (lockstore.SemaphoreState, time.Duration, map[int64]string, error) {
	if err := r.set.refusing(); err != nil {
		return lockstore.SemaphoreState{}, 0, nil, err
	}
	type read struct {
		limit int
		vs    []script.SemValue
	}
	start := time.Now()
	votes := fanOut(ctx, r, nil, func(ctx context.Context, _ int, n *redlockNode) (read, error) {
		limit, vs, err := script.SemInspect(ctx, n.client, key)
		return read{limit, vs}, err
	})
	if err := ctx.Err(); err != nil {
		return lockstore.SemaphoreState{}, 0, nil, fmt.Errorf("%w: %w", lockstore.ErrUnavailable, err)
	}
	type permitID struct {
		slot   int
		digest string
	}
	limits := make(map[int]int)
	t := tallyHeld(votes, func(v read, add func(permitID, script.SemValue)) {
		limits[v.limit]++
		for _, sv := range v.vs {
			if !sv.Provisional() { // no permit until a round confirms it
				add(permitID{sv.Slot, sv.Digest}, sv)
			}
		}
	})
	st := lockstore.SemaphoreState{Key: key, Limit: mostVoted(limits)}
	var late time.Duration
	digests := make(map[int64]string)
	could := false // a permit could hold a majority, counting the silent nodes
	for id, vs := range t.found {
		could = could || t.could(r, id)
		if !r.q().any(t.at[id]) {
			continue
		}
		left, longest := vs[0].Left, vs[0].Left
		for _, v := range vs {
			left = min(left, v.Left)
			longest = max(longest, v.Left)
		}
		v := semValues.majority(vs)
		left = max(left-script.Drift(left), 0)
		p := lockstore.Permit{Key: key, Owner: v.Owner, Limit: st.Limit, Fence: v.Fence,
			Granted: v.Length, Left: left, ExpiresAt: start.Add(left)}
		st.Holders = append(st.Holders, p)
		digests[p.Fence] = id.digest
		late = max(late, watchLate(start, longest, p.ExpiresAt))
	}
	if len(st.Holders) > 0 {
		lockstore.SortHolders(st.Holders)
		return st, late, digests, nil
	}
	return lockstore.SemaphoreState{}, 0, nil, t.missing(r, could)
}
