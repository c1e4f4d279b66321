package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lockgateway/lockgateway/internal/sleep"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/lockgateway/lockgateway/lockstore/internal/wait"
)

// Acquire implements Store.
func (r *Store) Acquire(ctx context.Context, key string, req lockstore.AcquireRequest) (lockstore.Lease, error) {
	if err := lockstore.CheckAcquire(key, req); err != nil {
		return lockstore.Lease{}, err
	}
	if req.Quota.Max != 0 {
		// Not yet: a count that holds across nodes would be kept on each,
		// like a lease, and need a majority. Refused rather than ignored.
		return lockstore.Lease{}, fmt.Errorf("%w: Redlock does not count locks per user", lockstore.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return lockstore.Lease{}, fmt.Errorf("%w: %w", lockstore.ErrUnavailable, err)
	}
	c := &acquireCall{key: key, digest: script.DigestHex(req.Token), req: req}
	lease, err := r.acquireRounds(ctx, c)
	if _, held := errors.AsType[*lockstore.HeldError](err); !held || req.Wait <= 0 {
		return lease, err
	}
	wake, stop := r.listen(ctx, script.Channel(key))
	defer stop()
	try := func() wait.Try {
		lease, err = r.acquireRounds(ctx, c)
		return raced(err)
	}
	if werr := wait.For(ctx, time.Now().Add(req.Wait), wake, wait.Raced, try); werr != nil {
		return lockstore.Lease{}, werr
	}
	return lease, err
}

// raced is a round's outcome for wait.For (wait.Raced, Redlock has no
// queue): busy when the key was held (or the semaphore full) for
// remaining, a round that found no quorum is tried again in the same way
// (the store unavailable in the middle of the wait), anything else ends
// the wait.
func raced(err error) wait.Try {
	if held, ok := errors.AsType[*lockstore.HeldError](err); ok {
		return wait.Try{Answer: wait.Busy, Due: held.Remaining + time.Millisecond}
	}
	if full, ok := errors.AsType[*lockstore.FullError](err); ok {
		return wait.Try{Answer: wait.Busy, Due: full.Remaining + time.Millisecond}
	}
	if errors.Is(err, lockstore.ErrUnavailable) {
		return wait.Try{Answer: wait.NoAnswer}
	}
	return wait.Try{Answer: wait.Done}
}

// acquireCall is one Acquire, across its rounds.
type acquireCall struct {
	key, digest string
	req         lockstore.AcquireRequest
	// rounds are the ids of the rounds run so far: a lease one of them
	// confirmed before it failed (a confirmation whose answer was lost) is
	// found by the next as a confirmed value, and is still this call's
	// new grant, not a renewal.
	rounds []string
}

// listen subscribes to ch, where a key's releases are told, on every node
// it can reach, at once; a node that cannot be reached only means fewer
// wake-ups.
func (r *Store) listen(ctx context.Context, ch string) (<-chan struct{}, func()) {
	wake := make(chan struct{}, 1)
	return wake, r.listenAs(ctx, ch, lockstore.NewToken(), wake)
}

// listenAs is listen on channel ch for the notifier registration id (a
// waiter's, or a watcher's: watch.go), and returns its stop.
func (r *Store) listenAs(ctx context.Context, ch, id string, wake chan struct{}) func() {
	ok := make([]bool, len(r.nodes))
	var wg sync.WaitGroup
	for i, n := range r.nodes {
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, r.nodeTimeout)
			defer cancel()
			ok[i] = n.notifier.Listen(nctx, ch, id, wake) == nil
		})
	}
	wg.Wait()
	return func() {
		for i, n := range r.nodes {
			if ok[i] {
				n.notifier.Stop(ch, id)
			}
		}
	}
}

// acquireRounds runs Redlock rounds until one is decisive: a split vote
// with no holder is retried a few times after a short random pause.
func (r *Store) acquireRounds(ctx context.Context, c *acquireCall) (lockstore.Lease, error) {
	for attempt := 1; ; attempt++ {
		lease, retry, err := r.acquireOnce(ctx, c)
		if !retry || attempt == redlockAttempts {
			return lease, err
		}
		if !pause(ctx, attempt) {
			return lockstore.Lease{}, err
		}
	}
}

// pause is the short random pause before another round, after the
// attempt-th split vote; false when ctx ended first.
func pause(ctx context.Context, attempt int) bool {
	return sleep.For(ctx, time.Millisecond+rand.N(min(5*time.Millisecond<<(attempt-1), 40*time.Millisecond)))
}

// countVotes reads a round's votes for the OnVote hook and the quorum
// error: a vote that got no answer and one from a quarantined node are
// counted here; judge reads each other (a counted node's answer) and
// names it, "granted" or "held".
func countVotes[R any](r *Store, votes []nodeResult[R], judge func(i int, v R) string) (failed, quarantined, refused int) {
	for i, v := range votes {
		var vote string
		switch {
		case v.err != nil:
			failed++
			if vote = failedVote(v.err); vote == "refused" {
				refused++
			}
		case !v.counted:
			quarantined++
			vote = "quarantined"
		default:
			vote = judge(i, v.val)
		}
		if r.onVote != nil {
			r.onVote(r.nodes[i].addr, vote)
		}
	}
	return failed, quarantined, refused
}

// unheld is n nodes' time until a slot frees (heldRemaining), none said
// held yet.
func unheld(n int) []time.Duration {
	d := make([]time.Duration, n)
	for i := range d {
		d[i] = -1
	}
	return d
}

// acquireOnce runs one Redlock round under a fresh round id (G1 in
// docs/safety.md, "The rules"). retry reports a split vote worth another
// round; err is then what to answer if there is none.
func (r *Store) acquireOnce(ctx context.Context, c *acquireCall) (_ lockstore.Lease, retry bool, _ error) {
	key, digest, req := c.key, c.digest, c.req
	if err := r.admit.enter(); err != nil {
		return lockstore.Lease{}, false, err
	}
	var votes []nodeResult[script.AcquireResult]
	defer func() { r.admit.leave(congested(r, votes), time.Now()) }()
	start := time.Now()
	a := script.AcquireArgs{
		Digest: digest, Ttl: req.TTL, Owner: req.Owner,
		// One seed for every node, so that their votes are close.
		Seed:        start.UnixMicro(),
		Attempt:     lockstore.NewToken(),
		Provisional: r.provisional(req.TTL),
		HoldAtLeast: req.HoldAtLeast,
	}
	c.rounds = append(c.rounds, a.Attempt)
	votes = fanOut(ctx, r, nil, func(ctx context.Context, _ int, n *redlockNode) (script.AcquireResult, error) {
		return script.Acquire(ctx, n.writes, key, a)
	})

	granted := make([]bool, len(votes)) // by node
	held := unheld(len(votes))
	heldAt := make([]bool, len(votes))
	failed, quarantined, refused := countVotes(r, votes, func(i int, v script.AcquireResult) string {
		if v.Code == script.AcquireHeld {
			held[i], heldAt[i] = v.Remaining, true
			return "held"
		}
		granted[i] = true
		return "granted"
	})

	var made []*script.LockValue // by node: a lease this round alone confirmed there
	if ctx.Err() == nil && r.q().all(granted) {
		lease, ok, confirmed := r.confirmGrant(ctx, c, a, votes, start)
		if ok {
			return lease, false, nil
		}
		made = confirmed
	}

	r.discard(ctx, key, digest, a.Attempt, votes, made)
	switch {
	case ctx.Err() != nil:
		return lockstore.Lease{}, false, fmt.Errorf("%w: %w", lockstore.ErrUnavailable, ctx.Err())
	case !r.q().all(or(granted, heldAt)):
		return lockstore.Lease{}, false, r.quorumError(failed, quarantined, refused)
	case !slices.Contains(granted, true): // then held nodes are a quorum
		return lockstore.Lease{}, false, &lockstore.HeldError{Remaining: r.heldRemaining(held)}
	case slices.Contains(heldAt, true):
		return lockstore.Lease{}, true, &lockstore.HeldError{Remaining: r.heldRemaining(held)}
	default: // a majority granted, but too slowly, or the confirmation did not stick
		return lockstore.Lease{}, true, fmt.Errorf("%w: redlock could not confirm a majority within the lease's validity", lockstore.ErrUnavailable)
	}
}

// provisional is how long a round's new value lives until a round confirms
// it (docs/safety.md, rule A): long enough for the confirmation to follow
// the votes on a busy machine, short enough that what a failed round left
// where its withdrawal did not reach goes by itself.
func (r *Store) provisional(ttl time.Duration) time.Duration {
	return min(ttl, max(20*r.nodeTimeout, time.Second))
}

// confirmGrant is G1 for a lock round (confirmVotes, with confirm.lua).
func (r *Store) confirmGrant(ctx context.Context, c *acquireCall, a script.AcquireArgs,
	votes []nodeResult[script.AcquireResult], start time.Time,
) (_ lockstore.Lease, ok bool, made []*script.LockValue) {
	key, req := c.key, c.req
	values := make([]roundValue, len(votes))
	for i, v := range votes {
		if v.err == nil && v.val.Code != script.AcquireHeld {
			lv := v.val.Value
			values[i] = roundValue{has: true, counted: v.counted, fence: lv.Fence,
				confirmed: !lv.Provisional(), maker: script.MakerOf(lv.Attempt), owner: lv.Owner}
		}
	}
	g, ok, made := confirmVotes(ctx, r, values, c.rounds, req.TTL, start, func(ctx context.Context, i int, n *redlockNode, maker string, fence int64) (int64, script.LockValue, error) {
		return script.Confirm(ctx, n.writes, key, a.Digest, maker, fence, req.TTL)
	})
	if !ok {
		return lockstore.Lease{}, false, made
	}
	return lockstore.Lease{
		Key:       key,
		Token:     req.Token,
		Owner:     g.ownerOr(req.Owner),
		Fence:     g.fence,
		Granted:   req.TTL,
		ExpiresAt: script.GrantEnd(start, req.TTL),
		Renewed:   g.renewal,
	}, true, nil
}

// failedVote names a vote that got no answer, for the OnVote hook:
// "timeout", "refused" (the node refuses writes) or "failed".
func failedVote(err error) string {
	switch {
	// The call's context ended, or the socket's deadline (ReadTimeout)
	// did first.
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.Is(err, lockstore.ErrRefused):
		return "refused"
	}
	return "failed"
}

// discard is G1's clean-up of a failed lock round (cleanup), with
// release.lua and discard.lua, on the node's batch.
func (r *Store) discard(ctx context.Context, key, digest, round string, votes []nodeResult[script.AcquireResult], made []*script.LockValue) {
	cleanup[script.AcquireResult, script.LockValue]{
		voted: func(v script.AcquireResult) bool { return v.Code == script.AcquireNew },
		release: func(ctx context.Context, n *redlockNode, v script.LockValue) error {
			// Never answered as a grant: deleted, whatever its
			// hold-at-least (rule L).
			return script.Release(ctx, n.writes, key, digest, v, false)
		},
		discard: func(ctx context.Context, n *redlockNode) error {
			return script.Discard(ctx, n.batch, key, digest, round)
		},
	}.run(ctx, r, votes, made)
}

// Extend implements Store. On a node it only ever lengthens the lease, so
// an extend that lands after its answer cannot cut short a later grant.
func (r *Store) Extend(ctx context.Context, key, token string, ttl time.Duration) (lockstore.Lease, error) {
	v, granted, start, err := extend(ctx, r, lockValues, lockExtends, key, token, ttl)
	if err != nil {
		return lockstore.Lease{}, err
	}
	return lockLease(key, token, v, granted, start), nil
}

// lockLease is the lease an extend that began at start answers.
func lockLease(key, token string, v script.LockValue, granted time.Duration, start time.Time) lockstore.Lease {
	return lockstore.Lease{
		Key: key, Token: token, Owner: v.Owner, Fence: v.Fence, Granted: granted,
		ExpiresAt: script.GrantEnd(start, granted),
	}
}

// extend is G3 for a lease or a permit: E on every node (c), and the
// answer: the value most of the nodes that extended it carry, the length
// granted, and the start of the extend, from which its expiry counts.
func extend[V any](ctx context.Context, r *Store, k valueKind[V], c extendCall[V], key, token string, ttl time.Duration) (_ V, granted time.Duration, start time.Time, _ error) {
	var none V
	if err := lockstore.CheckExtend(key, token, ttl); err != nil {
		return none, 0, start, err
	}
	digest := script.DigestHex(token)
	start = time.Now()
	votes := fanOut(ctx, r, nil, func(ctx context.Context, _ int, n *redlockNode) (V, error) {
		return c.on(ctx, n, key, digest, ttl)
	})
	v, granted, err := judgeExtend(ctx, r, k, votes, ttl, start)
	return v, granted, start, err
}

// judgeExtend is G3's answer from the nodes' answers to E (votes) of an
// extend asking for ttl that began at start: the value most of the nodes
// that extended it carry and the length granted, or why not.
func judgeExtend[V any](ctx context.Context, r *Store, k valueKind[V], votes []nodeResult[V], ttl time.Duration, start time.Time) (_ V, granted time.Duration, _ error) {
	var none V
	t := tallyOwned(votes)
	if err := ctx.Err(); err != nil {
		return none, 0, fmt.Errorf("%w: %w", lockstore.ErrUnavailable, err)
	}
	// Only the slot most nodes extended counts (another is a leftover of
	// the token's; a lock's values are all in one).
	bySlot := make(map[int]int)
	for _, v := range t.ok {
		bySlot[k.slot(v)]++
	}
	slot := mostVoted(bySlot)
	t.ok = nil
	for i, v := range votes {
		if t.okAt[i] = t.okAt[i] && k.slot(v.val) == slot; t.okAt[i] {
			t.ok = append(t.ok, v.val)
		}
	}
	if ttl == 0 {
		// Each node applied the length its value records; they may differ
		// (a renewal that reached only some). The shortest of the votes
		// counted is what every one of them holds at least, so validity is
		// measured from it. A node that recorded none refused (ErrInvalid).
		for _, v := range t.ok {
			if l := k.length(v); ttl == 0 || l < ttl {
				ttl = l
			}
		}
	}
	validity := ttl - time.Since(start) - script.Drift(ttl)
	switch {
	case r.q().all(t.okAt) && validity > 0:
		return k.majority(t.ok), ttl, nil
	case r.q().all(t.okAt):
		return none, 0, fmt.Errorf("%w: redlock extended the %s on a majority too slowly to vouch for it", lockstore.ErrUnavailable, k.what)
	}
	// What it found of the token's on a minority is left to expire: an
	// acquire round of the same token may have just written it, and
	// deleting it could cut that grant's majority.
	return none, 0, t.decide(r)
}

// Release implements Store, in two steps. It reads every node first and
// deletes only when the token holds a majority by that read; then, on each
// node, only the value it read (its attempt field unchanged). So a delete
// that lands late cannot remove a later grant to the same token, and a
// release that fails deletes nothing: an acquire round of the same token
// running at the same moment keeps its majority.
func (r *Store) Release(ctx context.Context, key, token string) error {
	if err := lockstore.CheckRelease(key, token); err != nil {
		return err
	}
	_, err := r.release(ctx, key, script.DigestHex(token), 0)
	return err
}

// ForceRelease implements Forcer: Release, with the digest of the holder
// a majority of the nodes read in place of the caller's token's.
func (r *Store) ForceRelease(ctx context.Context, key string, fence int64) (lockstore.Lease, error) {
	if err := lockstore.CheckForce(key, fence, false); err != nil {
		return lockstore.Lease{}, err
	}
	v, err := r.release(ctx, key, "", fence)
	if err != nil {
		return lockstore.Lease{}, lockstore.ForcedErr(err)
	}
	return lockstore.Lease{Key: key, Owner: v.Owner, Fence: v.Fence, Granted: v.Length}, nil
}

// release deletes digest's lease on key as read (Release), and returns
// the value most of the nodes that held it carried. A forced release
// passes digest "": the holder a majority of some list holds by the read
// (confirmed values, as Inspect counts them), with fence when that is not
// 0; from there on it is the caller's digest.
func (r *Store) release(ctx context.Context, key, digest string, fence int64) (script.LockValue, error) {
	if err := r.set.refusing(); err != nil {
		return script.LockValue{}, err
	}
	reads := fanOut(ctx, r, nil, func(ctx context.Context, _ int, n *redlockNode) (script.LockValue, error) {
		v, _, err := script.Inspect(ctx, n.batch, key)
		switch {
		case err != nil, digest == "", v.Digest == digest:
		case v.Digest == script.Lingering(digest): // released before its hold-at-least end (rule L)
			err = lockstore.ErrNotHeld
		default:
			err = lockstore.ErrTokenMismatch
		}
		return v, err
	})
	forced := digest == ""
	if forced {
		var err error
		if digest, err = r.holderRead(ctx, reads, fence); err != nil {
			return script.LockValue{}, err
		}
		for i, v := range reads {
			if v.err == nil && v.val.Digest != digest {
				reads[i].err = lockstore.ErrTokenMismatch
			}
		}
	}
	var linger time.Duration // the longest hold-at-least left on the nodes read
	for _, v := range reads {
		if v.err == nil && !forced {
			linger = max(linger, v.val.AtLeastLeft)
		}
	}
	return deleteReads(ctx, r, lockValues, reads, func(ctx context.Context, n *redlockNode, v script.LockValue) error {
		// A forced release frees the key at once, whatever the holder's
		// hold-at-least (rule L). A release keeps it on every node it
		// releases at least as long as on any node read (review fix).
		v.Linger, v.Forced = linger, forced
		return releaseRead(ctx, n.writes, key, digest, v, !forced, forced)
	})
}

// deleteReads is G2 after the reads of a lease or a permit: only if they
// show the token on a majority of some list, del on each node read holding
// it, with the value read there; done when the deletes hold a majority of
// every list where the token could hold one (released). It answers the
// value most of the nodes read carry.
func deleteReads[V any](ctx context.Context, r *Store, k valueKind[V], reads []nodeResult[V], del func(ctx context.Context, n *redlockNode, v V) error) (V, error) {
	var none V
	t := tallyOwned(reads)
	switch {
	case ctx.Err() != nil:
		return none, fmt.Errorf("%w: %w", lockstore.ErrUnavailable, ctx.Err())
	case !r.q().any(t.okAt):
		return none, t.decide(r)
	}
	held := make([]bool, len(reads))
	for i, v := range reads {
		held[i] = v.err == nil
	}
	dels := fanOut(ctx, r, held, func(ctx context.Context, i int, n *redlockNode) (struct{}, error) {
		return struct{}{}, del(ctx, n, reads[i].val)
	})
	return k.majority(t.ok), released(ctx, r, t, dels, k.what)
}

// holderRead is the digest of the lease a forced release's reads found
// held: the token whose confirmed values a majority of some list of
// counted nodes carry, as Inspect finds it, with fence when that is not 0.
// ErrNotHeld when no such lease can hold a majority, even counting the
// nodes that did not answer; ErrUnavailable when one still could.
func (r *Store) holderRead(ctx context.Context, reads []nodeResult[script.LockValue], fence int64) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("%w: %w", lockstore.ErrUnavailable, err)
	}
	t := tallyHeld(reads, func(v script.LockValue, add func(string, script.LockValue)) {
		// (A lingering value, rule L, is nobody's lease.)
		if !v.Provisional() && !strings.HasPrefix(v.Digest, "L") {
			add(v.Digest, v)
		}
	})
	could := false // a lease of the fence asked for could hold a majority
	for d, vs := range t.found {
		named := fence == 0 || lockValues.majority(vs).Fence == fence
		if named && r.q().any(t.at[d]) {
			return d, nil
		}
		could = could || (named && t.could(r, d))
	}
	return "", t.missing(r, could)
}

// releaseRead deletes digest's lease on one node if it is still as read
// (v: its value, attempt field included, and its expiry). When an acquire
// round of the same token took the lease over in between, or a renewal or
// extend moved it, it reads again and deletes what it finds, a few times:
// the token holds a majority, and a release concurrent with an acquire of
// the same token may take either order.
// pin (a forced release): a value read again must carry the fence first
// read, or it is a new grant of the token, not the lease read (review fix).
func releaseRead(ctx context.Context, c script.Clocked, key, digest string, v script.LockValue, honour, pin bool) error {
	fence, linger := v.Fence, v.Linger
	return deleteAsRead(v, func(v script.LockValue) error { return script.Release(ctx, c, key, digest, v, honour) },
		func() (script.LockValue, error) {
			v, _, err := script.Inspect(ctx, c, key)
			v.Linger, v.Forced = linger, pin
			switch {
			case err != nil:
			case v.Digest != digest:
				err = lockstore.ErrTokenMismatch
			case pin && v.Fence != fence:
				err = lockstore.ErrNotHeld
			}
			return v, err
		})
}

// deleteAsRead is G2's delete on one node, for a lease or a permit: del
// deletes v only as it was read; when the node answers that it moved (a
// renewal, an extend or a round of the same token wrote to it since),
// reread reads it again, and the delete is tried again with what it
// found, ReleaseReads times in all.
func deleteAsRead[V any](v V, del func(V) error, reread func() (V, error)) error {
	for range script.ReleaseReads {
		err := del(v)
		if !errors.Is(err, script.ErrMoved) {
			return err
		}
		if v, err = reread(); err != nil {
			return err
		}
	}
	return script.ErrMoved
}

// Inspect implements Store.
func (r *Store) Inspect(ctx context.Context, key string) (lockstore.Lease, error) {
	l, _, err := r.InspectSpread(ctx, key)
	return l, err
}

var _ lockstore.Spreader = (*Store)(nil)

// EndSpread implements Spreader: the drift allowance, by which ExpiresAt
// is conservative.
func (r *Store) EndSpread(ttl time.Duration) time.Duration { return script.Drift(ttl) }

// InspectSpread implements Spreader: Inspect, and the lease's latest end
// on the nodes read (watchLate).
func (r *Store) InspectSpread(ctx context.Context, key string) (lockstore.Lease, time.Duration, error) {
	if err := r.set.refusing(); err != nil {
		return lockstore.Lease{}, 0, err
	}
	start := time.Now()
	votes := fanOut(ctx, r, nil, func(ctx context.Context, _ int, n *redlockNode) (script.NodeListed, error) {
		v, remaining, err := script.Inspect(ctx, n.batch, key)
		return script.NodeListed{Held: err == nil, Value: v, Remaining: remaining}, err
	})
	if err := ctx.Err(); err != nil {
		return lockstore.Lease{}, 0, fmt.Errorf("%w: %w", lockstore.ErrUnavailable, err)
	}
	t := tallyHeld(votes, func(v script.NodeListed, add func(string, script.NodeListed)) {
		// A provisional value is no lease until a round confirms it
		// (confirm.lua, which tells watchers when it does).
		if !v.Value.Provisional() {
			add(v.Value.Digest, v)
		}
	})
	could := false // a token could hold a majority, counting the silent nodes
	for d, hs := range t.found {
		could = could || t.could(r, d)
		if !r.q().any(t.at[d]) {
			continue
		}
		l, longest := readLease(key, start, hs)
		return l.Lease, watchLate(start, longest, l.ExpiresAt), nil
	}
	return lockstore.Lease{}, 0, t.missing(r, could)
}

// Ping implements Store: nil when at least a quorum of nodes that are warm
// (connections open, scripts loaded) and not quarantined take a write
// (Redis's Ping: a node out of memory answers, but could grant nothing),
// that is, when a lease could be granted at once. It warms a node the
// background warm-up has not reached yet itself, within ctx rather than
// NodeTimeout: a readiness check may take a moment, a request may not.
func (r *Store) Ping(ctx context.Context) error {
	votes := fanOut(ctx, r, nil, func(nctx context.Context, i int, n *redlockNode) (struct{}, error) {
		if !n.isWarm() {
			if err := r.warm(ctx, n); err != nil {
				return struct{}{}, err
			}
			// The warm-up may have used up nctx's NodeTimeout.
			var cancel context.CancelFunc
			nctx, cancel = context.WithTimeout(ctx, r.nodeTimeout)
			defer cancel()
		}
		if err := script.RedisErr(n.client.Set(nctx, script.ReadyKey, "1", time.Minute).Err()); err != nil {
			return struct{}{}, err
		}
		return struct{}{}, r.checkSet(nctx, i, n)
	})
	ok := make([]bool, len(votes))
	failed, quarantined, refused := 0, 0, 0
	for i, v := range votes {
		switch {
		case v.err != nil:
			failed++
			if errors.Is(v.err, lockstore.ErrRefused) {
				refused++
			}
		case !v.counted:
			quarantined++
		default:
			ok[i] = true
		}
	}
	if r.q().all(ok) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", lockstore.ErrUnavailable, err)
	}
	return r.quorumError(failed, quarantined, refused)
}

// released is G2's answer after the deletes of a lease or permit (what):
// done when they hold a majority of every list where the read found that
// the token could hold one (quorums.covers).
func released[T any](ctx context.Context, r *Store, t ownedTally[T], dels []nodeResult[struct{}], what string) error {
	deleted := make([]bool, len(dels))
	n := 0
	for i, v := range dels {
		if v.err == nil && v.counted {
			deleted[i] = true
			n++
		}
	}
	if r.q().covers(or(t.okAt, t.unknownAt), deleted) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", lockstore.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: redlock released the %s on %d of %d nodes; a majority of %d is needed", lockstore.ErrUnavailable, what, n, len(r.nodes), r.q().need())
}

// watchLate is how much later than expiresAt, a Redlock read's earliest
// end (its nodes' shortest time left less the drift allowance, from start),
// the last node it counted may let the grant go: its longest time left
// plus the drift allowance. With the read's round trip (the nodes measured
// their time left at some moment within it), every counted node's expiry
// lies in [expiresAt, expiresAt+round trip+watchLate] on this clock.
func watchLate(start time.Time, longest time.Duration, expiresAt time.Time) time.Duration {
	return max(start.Add(longest+script.Drift(longest)).Sub(expiresAt), 0)
}
