package lockstore

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/rs/zerolog"
)

var (
	//go:embed lua/raise_fence.lua
	raiseFenceLua    string
	raiseFenceScript = redis.NewScript(raiseFenceLua)
)

const (
	// DefaultNodeTimeout is how long Redlock waits for one node by default.
	DefaultNodeTimeout = 50 * time.Millisecond
	// DefaultMaxTTL is the default quarantine of a restarted node: the
	// longest lease the gateway grants (LOCKGW_MAX_TTL's default).
	DefaultMaxTTL = 24 * time.Hour

	// A split vote (some nodes for us, none for anyone else on a majority)
	// is retried this many times in all, after a short random pause.
	redlockAttempts = 6
)

// RedlockOptions configures a Redlock. The zero value is usable.
type RedlockOptions struct {
	// NodeTimeout bounds every call to one node, for every operation; a dead
	// or paused node costs a request at most this long. Keep it far below
	// the shortest TTL in use. Default DefaultNodeTimeout.
	NodeTimeout time.Duration
	// MaxTTL is the longest lease callers may ask for. A node seen to have
	// restarted is kept out of every quorum for MaxTTL (plus the 1% clock
	// drift allowance) from the moment the restart is seen, so that every
	// lease it forgot has run out. Default DefaultMaxTTL.
	MaxTTL time.Duration
	// Logger receives one warning per detected restart. The zero value logs
	// nothing.
	Logger zerolog.Logger
	// OnVote, when set, hears each node's vote in every acquire round:
	// "granted", "held", "timeout", "failed" or "quarantined". It must be
	// quick; it runs on the request's path.
	OnVote func(node, vote string)
	// DisableRestartGuard turns restart detection and quarantine off. It
	// exists so tests can show what the guard prevents; never set it in
	// production.
	DisableRestartGuard bool
}

// NodeStatus is one Redlock node as /readyz shows it.
type NodeStatus struct {
	Addr string
	// Up is whether the node answered the last call made to it (false
	// before the first call).
	Up bool
	// QuarantinedUntil is when a node seen to restart counts again in
	// quorums; zero when it is not quarantined.
	QuarantinedUntil time.Time
}

// QuorumError is the ErrUnavailable a Redlock returns when too many nodes
// failed, or are quarantined, for a majority to be possible. Its message is
// fit for a client: it names counts, not addresses.
type QuorumError struct {
	Nodes       int // nodes in the Redlock
	Quorum      int // votes needed: Nodes/2 + 1
	Failed      int // nodes that did not answer in time
	Quarantined int // nodes that answered but are quarantined after a restart
}

func (e *QuorumError) Error() string { return ErrUnavailable.Error() + ": " + e.QuorumDetail() }

// QuorumDetail says why no majority was possible, in words fit for a
// problem detail: "3 of 5 Redlock nodes did not answer; a majority of 3 is
// impossible".
func (e *QuorumError) QuorumDetail() string {
	msg := fmt.Sprintf("%d of %d Redlock nodes did not answer", e.Failed, e.Nodes)
	if e.Quarantined > 0 {
		verb := "are"
		if e.Quarantined == 1 {
			verb = "is"
		}
		msg += fmt.Sprintf(" and %d %s quarantined after a restart", e.Quarantined, verb)
	}
	return msg + fmt.Sprintf("; a majority of %d is impossible", e.Quorum)
}

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *QuorumError) Is(target error) bool { return target == ErrUnavailable }

// Redlock is a Store over N ≥ 3 independent Redis masters (the Redlock
// algorithm): a lease is granted when a majority of the nodes took it, in
// time. Every node runs the single-node scripts of Redis; the nodes never
// talk to each other.
//
// Every operation goes to all nodes at once, each call bounded by
// NodeTimeout, and waits for all of them, so an operation costs one round
// trip to the slowest node that answers, or NodeTimeout. Only nodes that are
// not quarantined count ("counted" below); a quarantined node is still
// written to, so that it holds current leases when it counts again.
//
// # Acquire
//
// Granted when at least Nodes/2+1 counted nodes granted (or re-granted to the
// same token) and validity = TTL − elapsed − drift is positive, where elapsed
// runs on the monotonic clock from before the first call and drift =
// TTL/100 + 2 ms. ExpiresAt is the end of that validity: start + TTL − drift,
// which is the grant moment plus validity. Otherwise the token's lease is
// released on every node (waiting only for the nodes that answered; the rest
// are released in the background under a fresh NodeTimeout) and Acquire
// answers:
//
//   - *HeldError when no counted node granted and at least a quorum of them
//     hold the key for other tokens; Remaining is how long until fewer than
//     a quorum do (the quorum-th longest remaining TTL among them).
//   - *QuorumError (ErrUnavailable) when fewer than a majority answered.
//   - Otherwise the vote was split (we got some nodes, but not a majority)
//     or a majority granted too slowly. It is retried after a random pause
//     of 1 ms plus up to 5, 10, 20, 40, 40 ms, at most 6 attempts in all and
//     never past ctx; then *HeldError if another token held any node, else
//     ErrUnavailable. A node whose release for this token could
//     not be confirmed is not counted for the rest of the call, because the
//     release may still arrive after the retry's grant.
//
// # Fences
//
// Each node keeps its own counter and grants max(counter+1, its clock in µs).
// The grant's fence F is the maximum over the counted granting nodes; before
// Acquire returns, raise_fence.lua raises the counter to at least F and
// stores F in the lock's value on each granting node whose fence differs, and
// the grant stands only if a majority of counted nodes confirmed F (and the
// validity, measured after that, is still positive).
//
// Guaranteed: if Acquire A returned fence F before Acquire B started, and B
// grants the key to another holder, then B's fence > F. B's majority shares a
// node with the majority that confirmed F, that node's counter was ≥ F before
// B ran there, so it voted > F and B's fence (a maximum) is > F. The argument
// needs no timing assumption, only that the shared node still has its
// counter: it holds unless the node lost its data and is counted anyway
// (quarantine disabled, or the restart not seen by this process; then the
// clock-seeded fence is still > F unless that host's clock is behind the
// clock that produced F), or the counter expired (FenceRetention after the
// key's last grant). So a fenced resource stays safe even when Redlock's
// mutual exclusion fails.
//
// Not guaranteed: the order of fences between acquires that overlap in time.
// Two grants can only overlap when Redlock's assumptions broke (a clock jump,
// an unguarded restart, a pause longer than the lease); their fences are then
// distinct but in either order, and the resource's "highest fence seen" rule
// is what orders their writes. A same-token re-acquire keeps its fence when a
// majority re-granted it (Renewed); otherwise it is a new grant with a new
// fence.
//
// # Extend, Release, Inspect: mixed answers
//
// Each node answers "ok", "not held" (free), "mismatch" (another token) or
// nothing (an error, a timeout, or quarantined: "unknown"). With q =
// Nodes/2+1 counted votes needed:
//
//   - Extend succeeds when ok ≥ q and the validity measured from the extend's
//     own start is positive (ExpiresAt = start + TTL − drift); a node where
//     the lease expired is never extended (extend.lua refuses). Else
//     ErrTokenMismatch when mismatch ≥ q (other tokens hold it on a majority
//     of the nodes); ErrNotHeld when ok + unknown < q (the token cannot hold a
//     majority, so it is not held, even if another token holds a minority);
//     ErrUnavailable otherwise (a majority may still be the token's). After
//     ErrTokenMismatch or ErrNotHeld the token's leftovers are released on
//     every node, so a failed extend leaves no long-lived minority behind.
//   - Release returns nil when ok ≥ q, ErrTokenMismatch when mismatch ≥ q,
//     ErrNotHeld when ok + unknown < q, ErrUnavailable otherwise. Every node
//     is released, whatever the outcome.
//   - Inspect reports the holder found on ≥ q counted nodes, with the
//     smallest remaining TTL among them less the drift allowance, and the
//     fence most of them carry (the highest on a tie); ErrNotHeld when no
//     holder can have a majority even counting the unknown nodes;
//     ErrUnavailable otherwise.
//
// # Restarted nodes
//
// A Redis restarted without persistence has forgotten the leases it held,
// and could vote a second holder into a lease that is still valid. Every new
// connection to a node first runs INFO server (go-redis's OnConnect, before
// the connection carries any command, and failing the connection when INFO
// fails). A run_id different from the one seen before means the process
// restarted: the node is quarantined for MaxTTL + drift and one warning is
// logged. No restart can slip between two operations: the old process's
// connections die with it, so every reply from the new process comes over a
// connection whose OnConnect already saw its run_id, and a node's vote is
// checked against the quarantine after its reply arrives.
//
// Limits: the first run_id a process sees is trusted, so a node that
// restarted before this gateway process first reached it is not quarantined
// by this process (other gateway processes that were running do quarantine
// it). Deployments that restart gateways and Redis together should delay
// Redis's start by MaxTTL or enable AOF with appendfsync always, as the
// Redlock description advises. A FLUSHALL, which loses data without a
// restart, is not detected.
type Redlock struct {
	nodes       []*redlockNode
	quorum      int
	nodeTimeout time.Duration
	quarantine  time.Duration
	log         zerolog.Logger
	onVote      func(node, vote string)

	mu     sync.Mutex // guards closed, and bg.Add against Close's bg.Wait
	closed bool
	bg     sync.WaitGroup // background releases on nodes that did not answer
}

var _ Store = (*Redlock)(nil)

type redlockNode struct {
	addr     string
	client   *redis.Client
	notifier *notifier // releases on this node, for waiters

	mu               sync.Mutex
	up               bool
	runID            string
	quarantinedUntil time.Time
}

// OpenRedlock returns a Redlock over the Redis masters at urls (redis:// or
// rediss://, one per node). It sets what Redlock relies on: timeouts of
// NodeTimeout, context deadlines honoured, no command retries (a retried
// release whose first attempt succeeded would report "not held"), one dial
// attempt per call, and no optional handshake round trips.
func OpenRedlock(urls []string, opts RedlockOptions) (*Redlock, error) {
	nodeTimeout := cmp.Or(opts.NodeTimeout, DefaultNodeTimeout)
	nodes := make([]*redis.Options, 0, len(urls))
	for i, u := range urls {
		o, err := redis.ParseURL(strings.TrimSpace(u))
		if err != nil {
			return nil, fmt.Errorf("lockstore: redlock URL %d: %w", i+1, err)
		}
		o.DialTimeout = nodeTimeout
		o.ReadTimeout = nodeTimeout
		o.WriteTimeout = nodeTimeout
		o.DisableIdentity = true
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		nodes = append(nodes, o)
	}
	return NewRedlock(nodes, opts)
}

// NewRedlock returns a Redlock over one client per element of nodes, which it
// copies; Close closes the clients. Whatever nodes say, each client gets
// MaxRetries -1, ContextTimeoutEnabled, a single dial attempt per call when
// DialerRetries is unset, and (unless the restart guard is off) an OnConnect
// hook that runs after the caller's own.
//
// It fails with fewer than three nodes or two nodes with the same address.
func NewRedlock(nodes []*redis.Options, opts RedlockOptions) (*Redlock, error) {
	if len(nodes) < 3 {
		return nil, fmt.Errorf("lockstore: redlock needs at least 3 nodes, got %d", len(nodes))
	}
	if opts.NodeTimeout < 0 || opts.MaxTTL < 0 {
		return nil, errors.New("lockstore: redlock NodeTimeout and MaxTTL must not be negative")
	}
	maxTTL := cmp.Or(opts.MaxTTL, DefaultMaxTTL)
	r := &Redlock{
		quorum:      len(nodes)/2 + 1,
		nodeTimeout: cmp.Or(opts.NodeTimeout, DefaultNodeTimeout),
		quarantine:  maxTTL + drift(maxTTL),
		log:         opts.Logger,
		onVote:      opts.OnVote,
	}
	seen := make(map[string]bool, len(nodes))
	for _, o := range nodes {
		if seen[o.Addr] {
			return nil, fmt.Errorf("lockstore: redlock node %s is listed twice", o.Addr)
		}
		seen[o.Addr] = true
	}
	for _, o := range nodes {
		o := *o
		o.MaxRetries = -1
		o.ContextTimeoutEnabled = true
		if o.DialerRetries <= 0 {
			o.DialerRetries = 1
		}
		n := &redlockNode{addr: o.Addr}
		if !opts.DisableRestartGuard {
			o.OnConnect = r.onConnect(n, o.OnConnect)
		}
		n.client = redis.NewClient(&o)
		n.notifier = newNotifier(n.client)
		r.nodes = append(r.nodes, n)
	}
	return r, nil
}

// drift is Redlock's allowance for the clocks of the Redis hosts running
// at different rates: 1% of the TTL, plus 2 ms for timer granularity.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// Acquire implements Store.
func (r *Redlock) Acquire(ctx context.Context, key string, req AcquireRequest) (Lease, error) {
	if err := checkAcquire(key, req); err != nil {
		return Lease{}, err
	}
	if err := ctx.Err(); err != nil {
		return Lease{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	digest := digestHex(req.Token)
	// suspect outlives the rounds of one wait: a release still on its way
	// to a node carries this same token and could delete a later grant.
	suspect := make([]bool, len(r.nodes))
	lease, err := r.acquireRounds(ctx, key, digest, req, suspect)
	if _, held := errors.AsType[*HeldError](err); !held || req.Wait <= 0 {
		return lease, err
	}
	wake, stop := r.listen(ctx, key)
	defer stop()
	return retryUntil(ctx, req, wake, func() (Lease, error) { return r.acquireRounds(ctx, key, digest, req, suspect) })
}

// listen subscribes to key's releases on every node it can reach, at once;
// a node that cannot be reached only means fewer wake-ups.
func (r *Redlock) listen(ctx context.Context, key string) (<-chan struct{}, func()) {
	id := NewToken()
	wake := make(chan struct{}, 1)
	ok := make([]bool, len(r.nodes))
	var wg sync.WaitGroup
	for i, n := range r.nodes {
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, r.nodeTimeout)
			defer cancel()
			ok[i] = n.notifier.listen(nctx, channel(key), id, wake) == nil
		})
	}
	wg.Wait()
	return wake, func() {
		for i, n := range r.nodes {
			if ok[i] {
				n.notifier.stop(channel(key), id)
			}
		}
	}
}

// acquireRounds runs Redlock rounds until one is decisive: a split vote
// with no holder is retried a few times after a short random pause.
func (r *Redlock) acquireRounds(ctx context.Context, key, digest string, req AcquireRequest, suspect []bool) (Lease, error) {
	for attempt := 1; ; attempt++ {
		lease, retry, err := r.acquireOnce(ctx, key, digest, req, suspect)
		if !retry || attempt == redlockAttempts {
			return lease, err
		}
		pause := time.Millisecond + rand.N(min(5*time.Millisecond<<(attempt-1), 40*time.Millisecond))
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return Lease{}, err
		case <-t.C:
		}
	}
}

// acquireOnce runs one Redlock round. retry reports a split vote worth
// another round; err is then what to answer if there is none.
func (r *Redlock) acquireOnce(ctx context.Context, key, digest string, req AcquireRequest, suspect []bool) (_ Lease, retry bool, _ error) {
	start := time.Now()
	// One seed for every node, so that they agree on the fence unless a
	// node's counter is ahead of it, and the write-back round is skipped.
	seed := start.UnixMicro()
	votes := fanOut(ctx, r, nil, func(ctx context.Context, n *redlockNode) (acquireResult, error) {
		return nodeAcquire(ctx, n.client, key, digest, req.TTL, req.Owner, waitTicket{}, seed)
	})

	var granted []int
	var held []time.Duration
	failed, quarantined := 0, 0
	for i, v := range votes {
		vote := "granted"
		switch {
		case v.err != nil || suspect[i]:
			failed++
			vote = "failed"
			if errors.Is(v.err, context.DeadlineExceeded) {
				vote = "timeout"
			}
		case !v.counted:
			quarantined++
			vote = "quarantined"
		case v.val.code == acquireHeld:
			held = append(held, v.val.remaining)
			vote = "held"
		default:
			granted = append(granted, i)
		}
		if r.onVote != nil {
			r.onVote(r.nodes[i].addr, vote)
		}
	}

	if ctx.Err() == nil && len(granted) >= r.quorum {
		lease, ok := r.confirmGrant(ctx, key, digest, req, votes, granted, start)
		if ok {
			return lease, false, nil
		}
	}

	r.releaseAll(ctx, key, digest, answeredMask(votes), suspect)
	switch {
	case ctx.Err() != nil:
		return Lease{}, false, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	case len(granted)+len(held) < r.quorum:
		return Lease{}, false, &QuorumError{Nodes: len(r.nodes), Quorum: r.quorum, Failed: failed, Quarantined: quarantined}
	case len(granted) == 0: // then len(held) ≥ quorum
		return Lease{}, false, &HeldError{Remaining: r.heldRemaining(held)}
	case len(held) > 0:
		return Lease{}, true, &HeldError{Remaining: r.heldRemaining(held)}
	default: // a majority granted, but too slowly, or the fence did not stick
		return Lease{}, true, fmt.Errorf("%w: redlock could not confirm a majority within the lease's validity", ErrUnavailable)
	}
}

// confirmGrant picks the grant's fence, writes it back to the granting nodes
// that do not carry it yet, and checks that a majority confirmed it within
// the validity.
func (r *Redlock) confirmGrant(ctx context.Context, key, digest string, req AcquireRequest,
	votes []nodeResult[acquireResult], granted []int, start time.Time,
) (Lease, bool) {
	var renewed []int64
	var all []int64
	for _, i := range granted {
		all = append(all, votes[i].val.value.fence)
		if votes[i].val.code == acquireRenewed {
			renewed = append(renewed, votes[i].val.value.fence)
		}
	}
	// Re-granted on a majority: the token held the key throughout, so it
	// keeps its fence (the highest, in case a node re-granted it anew after
	// an intervening holder: that node's fence is above that holder's).
	isRenewed := len(renewed) >= r.quorum
	fence := slices.Max(all)
	if isRenewed {
		fence = slices.Max(renewed)
	}

	// Write F back to every node that granted (quarantined ones too, so they
	// agree when they count again) and does not carry F yet.
	confirmed := 0
	rewrite := make([]bool, len(votes))
	for i, v := range votes {
		if v.err != nil || v.val.code == acquireHeld {
			continue
		}
		if v.val.value.fence == fence {
			if v.counted && slices.Contains(granted, i) {
				confirmed++
			}
			continue
		}
		rewrite[i] = true
	}
	if confirmed < r.quorum {
		retain := strconv.FormatInt((req.TTL + FenceRetention).Milliseconds(), 10)
		f := strconv.FormatInt(fence, 10)
		raised := fanOut(ctx, r, rewrite, func(ctx context.Context, n *redlockNode) (int64, error) {
			v, err := raiseFenceScript.Run(ctx, n.client, []string{lockKey(key), fenceKey(key)}, digest, f, retain).Int64()
			return v, redisErr(err)
		})
		for i, v := range raised {
			if rewrite[i] && v.err == nil && v.counted && v.val == 1 && slices.Contains(granted, i) {
				confirmed++
			}
		}
	}

	validity := req.TTL - time.Since(start) - drift(req.TTL)
	if confirmed < r.quorum || validity <= 0 || ctx.Err() != nil {
		return Lease{}, false
	}
	owner := req.Owner
	for _, i := range granted {
		if votes[i].val.value.fence == fence {
			owner = votes[i].val.value.owner // a re-grant keeps the stored owner
			break
		}
	}
	return Lease{
		Key:       key,
		Token:     req.Token,
		Owner:     owner,
		Fence:     fence,
		TTL:       req.TTL,
		ExpiresAt: start.Add(req.TTL - drift(req.TTL)),
		Renewed:   isRenewed,
	}, true
}

// heldRemaining is how long until fewer than a majority of the nodes that
// answered "held" still hold the key: the quorum-th longest remaining TTL,
// or the shortest when fewer than a quorum said held.
func (r *Redlock) heldRemaining(held []time.Duration) time.Duration {
	slices.Sort(held)
	slices.Reverse(held)
	return held[min(r.quorum, len(held))-1]
}

// releaseAll releases digest's lease on every node under fresh contexts: a
// failed round must not leave a minority holding the key, even when the
// caller's context is done. It waits for the nodes in wait and releases the
// others in the background (they did not answer; waiting for them would make
// a dead node cost a request twice). Nodes whose release is not confirmed
// become suspect: a release still on its way there could remove a later
// grant to the same token.
func (r *Redlock) releaseAll(ctx context.Context, key, digest string, wait, suspect []bool) {
	detached := context.WithoutCancel(ctx)
	release := func(n *redlockNode) error {
		nctx, cancel := context.WithTimeout(detached, r.nodeTimeout)
		defer cancel()
		err := nodeRelease(nctx, n.client, key, digest)
		n.observe(detached, err)
		return err
	}

	var wg sync.WaitGroup
	for i, n := range r.nodes {
		if wait[i] {
			wg.Go(func() {
				if err := release(n); err != nil && !answered(err) {
					suspect[i] = true
				}
			})
			continue
		}
		suspect[i] = true
		r.mu.Lock()
		if !r.closed {
			r.bg.Go(func() { _ = release(n) })
		}
		r.mu.Unlock()
	}
	wg.Wait()
}

// Extend implements Store.
func (r *Redlock) Extend(ctx context.Context, key, token string, ttl time.Duration) (Lease, error) {
	if err := checkToken(key, token, ttl); err != nil {
		return Lease{}, err
	}
	digest := digestHex(token)
	start := time.Now()
	votes := fanOut(ctx, r, nil, func(ctx context.Context, n *redlockNode) (lockValue, error) {
		return nodeExtend(ctx, n.client, key, digest, ttl)
	})
	t := tallyOwned(votes)
	if err := ctx.Err(); err != nil {
		return Lease{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	validity := ttl - time.Since(start) - drift(ttl)
	switch {
	case len(t.ok) >= r.quorum && validity > 0:
		v := majorityValue(t.ok)
		return Lease{
			Key: key, Token: token, Owner: v.owner, Fence: v.fence, TTL: ttl,
			ExpiresAt: start.Add(ttl - drift(ttl)),
		}, nil
	case len(t.ok) >= r.quorum:
		return Lease{}, fmt.Errorf("%w: redlock extended the lease on a majority too slowly to vouch for it", ErrUnavailable)
	case t.mismatch >= r.quorum:
		r.releaseAll(ctx, key, digest, answeredMask(votes), make([]bool, len(r.nodes)))
		return Lease{}, ErrTokenMismatch
	case len(t.ok)+t.unknown < r.quorum:
		r.releaseAll(ctx, key, digest, answeredMask(votes), make([]bool, len(r.nodes)))
		return Lease{}, ErrNotHeld
	}
	return Lease{}, t.unavailable(r)
}

// Release implements Store.
func (r *Redlock) Release(ctx context.Context, key, token string) error {
	if err := checkToken(key, token, MinTTL); err != nil {
		return err
	}
	digest := digestHex(token)
	votes := fanOut(ctx, r, nil, func(ctx context.Context, n *redlockNode) (struct{}, error) {
		return struct{}{}, nodeRelease(ctx, n.client, key, digest)
	})
	t := tallyOwned(votes)
	switch {
	case len(t.ok) >= r.quorum:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	case t.mismatch >= r.quorum:
		return ErrTokenMismatch
	case len(t.ok)+t.unknown < r.quorum:
		return ErrNotHeld
	}
	return t.unavailable(r)
}

// Inspect implements Store.
func (r *Redlock) Inspect(ctx context.Context, key string) (Lease, error) {
	type held struct {
		value     lockValue
		remaining time.Duration
	}
	start := time.Now()
	votes := fanOut(ctx, r, nil, func(ctx context.Context, n *redlockNode) (held, error) {
		v, remaining, err := nodeInspect(ctx, n.client, key)
		return held{v, remaining}, err
	})
	if err := ctx.Err(); err != nil {
		return Lease{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	holders := make(map[string][]held) // by token digest
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
			holders[v.val.value.digest] = append(holders[v.val.value.digest], v.val)
		}
	}
	best := 0
	for _, hs := range holders {
		best = max(best, len(hs))
		if len(hs) < r.quorum {
			continue
		}
		values := make([]lockValue, len(hs))
		remaining := hs[0].remaining
		for i, h := range hs {
			values[i] = h.value
			remaining = min(remaining, h.remaining)
		}
		v := majorityValue(values)
		ttl := max(remaining-drift(remaining), 0)
		return Lease{Key: key, Owner: v.owner, Fence: v.fence, TTL: ttl, ExpiresAt: start.Add(ttl)}, nil
	}
	if best+unknown < r.quorum {
		return Lease{}, ErrNotHeld
	}
	return Lease{}, &QuorumError{Nodes: len(r.nodes), Quorum: r.quorum, Failed: failed, Quarantined: quarantined}
}

// Ping implements Store: nil when at least a quorum of nodes that are not
// quarantined answer, that is, when a lease could be granted.
func (r *Redlock) Ping(ctx context.Context) error {
	votes := fanOut(ctx, r, nil, func(ctx context.Context, n *redlockNode) (struct{}, error) {
		return struct{}{}, redisErr(n.client.Ping(ctx).Err())
	})
	ok, failed, quarantined := 0, 0, 0
	for _, v := range votes {
		switch {
		case v.err != nil:
			failed++
		case !v.counted:
			quarantined++
		default:
			ok++
		}
	}
	if ok >= r.quorum {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return &QuorumError{Nodes: len(r.nodes), Quorum: r.quorum, Failed: failed, Quarantined: quarantined}
}

// Nodes reports each node's state, in the order the nodes were given.
func (r *Redlock) Nodes() []NodeStatus {
	now := time.Now()
	out := make([]NodeStatus, len(r.nodes))
	for i, n := range r.nodes {
		n.mu.Lock()
		out[i] = NodeStatus{Addr: n.addr, Up: n.up}
		if now.Before(n.quarantinedUntil) {
			out[i].QuarantinedUntil = n.quarantinedUntil.Round(0)
		}
		n.mu.Unlock()
	}
	return out
}

// Close implements Store. It waits for background releases (each bounded by
// NodeTimeout) before closing the clients.
func (r *Redlock) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.bg.Wait()
	var errs []error
	for _, n := range r.nodes {
		n.notifier.close()
		errs = append(errs, n.client.Close())
	}
	return errors.Join(errs...)
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
// each under its own NodeTimeout, and waits for all of them.
func fanOut[T any](ctx context.Context, r *Redlock, only []bool, call func(context.Context, *redlockNode) (T, error)) []nodeResult[T] {
	res := make([]nodeResult[T], len(r.nodes))
	var wg sync.WaitGroup
	for i, n := range r.nodes {
		if only != nil && !only[i] {
			res[i].err = errSkipped
			continue
		}
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, r.nodeTimeout)
			defer cancel()
			v, err := call(nctx, n)
			n.observe(ctx, err)
			if err != nil && !answered(err) && !errors.Is(err, ErrUnavailable) {
				r.log.Error().Err(err).Str("node", n.addr).Msg("redlock: unexpected reply")
			}
			res[i] = nodeResult[T]{val: v, err: err, counted: !n.quarantined(time.Now())}
		})
	}
	wg.Wait()
	return res
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
	ok                  []T
	mismatch            int
	unknown             int // failed + quarantined
	failed, quarantined int
}

func tallyOwned[T any](votes []nodeResult[T]) ownedTally[T] {
	var t ownedTally[T]
	for _, v := range votes {
		switch {
		case !answered(v.err):
			t.unknown++
			t.failed++
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
	return &QuorumError{Nodes: len(r.nodes), Quorum: r.quorum, Failed: t.failed, Quarantined: t.quarantined}
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

// observe records whether the node answered, unless the caller's own
// context ended the call.
func (n *redlockNode) observe(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	n.mu.Lock()
	n.up = err == nil || !errors.Is(err, ErrUnavailable)
	n.mu.Unlock()
}

func (n *redlockNode) quarantined(now time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return now.Before(n.quarantinedUntil)
}

// onConnect returns the OnConnect hook that detects restarts: it runs on
// every new connection before the connection carries any command.
func (r *Redlock) onConnect(n *redlockNode, next func(context.Context, *redis.Conn) error) func(context.Context, *redis.Conn) error {
	return func(ctx context.Context, cn *redis.Conn) error {
		if next != nil {
			if err := next(ctx, cn); err != nil {
				return err
			}
		}
		info, err := cn.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		runID := infoField(info, "run_id")
		if runID == "" {
			return errors.New("lockstore: INFO server reported no run_id")
		}
		n.mu.Lock()
		prev := n.runID
		n.runID = runID
		restarted := prev != "" && prev != runID
		var until time.Time
		if restarted {
			until = time.Now().Add(r.quarantine)
			n.quarantinedUntil = until
		}
		n.mu.Unlock()
		if restarted {
			r.log.Warn().Str("node", n.addr).Time("until", until).
				Msg("redlock: node restarted and may have lost its locks; its votes do not count until then")
		}
		return nil
	}
}

// infoField returns a field of an INFO reply ("name:value" lines).
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
