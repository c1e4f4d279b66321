package lockstore

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
)

// The Redlock store lives in five files:
//
//	redlock.go         the type, its options and its rules (this file)
//	redlock_ops.go     Acquire, Extend, Release, Inspect, Ping
//	redlock_quorum.go  fan-out to the nodes and counting their answers
//	redlock_node.go    one node: health, warm-up, the restart guard
//	redlock_batch.go   one node: concurrent scripts sent as one pipeline
//
// docs/safety.md argues, rule by rule, why no interleaving of these
// operations grants one key to two holders.

const (
	// DefaultNodeTimeout is how long Redlock waits for one node by default.
	DefaultNodeTimeout = 50 * time.Millisecond
	// DefaultMaxTTL is the default longest quarantine of a restarted node: the
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
	// "granted", "held", "timeout", "refused", "failed" or "quarantined". It must be
	// quick; it runs on the request's path.
	OnVote func(node, vote string)
	// NodeNames, when set, is how the node list the nodes remember names
	// each node (docs/safety.md, "Changing the node list"), in the order of
	// the nodes; by default each node's host:port/db as configured. Set it
	// when gateways reach a node under different addresses (a proxy of
	// their own): every gateway must name each node the same way.
	NodeNames []string
	// DisableRestartGuard turns restart detection and quarantine off. It
	// exists so tests can show what the guard prevents; never set it in
	// production.
	DisableRestartGuard bool
	// Tracer, when set, traces each node call a request makes (trace.go).
	Tracer trace.Tracer
}

// Redlock is a Store over N ≥ 3 independent Redis masters (the Redlock
// algorithm): a lease is granted when a majority of the nodes took it, in
// time. Every node runs the single-node scripts of Redis; the nodes never
// talk to each other.
//
// Every operation goes to all nodes at once, each node's part bounded by
// NodeTimeout, and waits for all of them, so an operation costs one round
// trip to the slowest node that answers, or NodeTimeout. Only nodes that are
// not quarantined count ("counted" below); a quarantined node is still
// written to, so that it holds current leases when it counts again.
//
// # Attempts: what makes retries and stragglers safe
//
// A node call that times out may still run on the node later, after the
// operation answered its caller. So every write is bound to one acquire
// round: each round has a random attempt id that the value it writes or
// joins records; a failed round takes only itself out (discard.lua); a
// release deletes only the value it read, attempt field unchanged; extends
// and renewals only lengthen. docs/safety.md states these rules once, with
// the proof that they keep one holder, and the scripts' header comments give
// their exact semantics. A lease may therefore live on some node longer than
// the Lease says (ExpiresAt stays a conservative end of validity), and after
// more than four rounds took one lease over on a node it is "pinned" there:
// only a Release or its TTL ends it.
//
// # Acquire
//
// Granted when at least Nodes/2+1 counted nodes granted (or re-granted to the
// same token) and validity = TTL − elapsed − drift is positive, where elapsed
// runs on the monotonic clock from before the first call and drift =
// TTL/100 + 2 ms. ExpiresAt is the end of that validity: start + TTL − drift,
// which is the grant moment plus validity. Otherwise the round's new values
// are deleted (waiting only for the nodes that answered; the rest in the
// background under a fresh NodeTimeout) and Acquire answers:
//
//   - *HeldError when no counted node granted and at least a quorum of them
//     hold the key for other tokens; Remaining is how long until fewer than
//     a quorum do (the quorum-th longest remaining TTL among them).
//   - *QuorumError (ErrUnavailable) when fewer than a majority answered.
//   - Otherwise the vote was split (we got some nodes, but not a majority)
//     or a majority granted too slowly. It is retried after a random pause
//     of 1 ms plus up to 5, 10, 20, 40, 40 ms, at most 6 attempts in all and
//     never past ctx; then *HeldError if another token held any node, else
//     ErrUnavailable.
//
// A waiting Acquire (Wait > 0) repeats this until the wait runs out, woken
// by releases on any node; a round that finds no quorum in the middle of a
// wait is retried like a held key.
//
// # Fences
//
// Each node keeps its own counter and votes max(counter+1, seed, its clock
// in µs less FenceMargin), the seed being the gateway's clock at the start of
// the round (one seed for all nodes, so they usually agree).
// The grant's fence F is chosen from the counted granting nodes' fences so
// that twins (acquires of one token at once) agree (pickFence): the
// highest fence of the values one round made on a majority (the round's
// own new votes, or a twin's), else a fence a majority of the values
// carry, else the highest of all; each is at least the fences of a
// majority of the granting nodes.
// Before Acquire returns, raise_fence.lua raises the counter to at least F
// and stores F, marked confirmed, in the value on each granting node that
// does not carry F confirmed yet, and the grant stands only if a majority
// of counted nodes confirmed F (and the validity, measured after that, is
// still positive). A confirmed fence among the maker's values is preferred
// to the highest, so a retry after the answer keeps F over votes that
// landed late.
//
// Guaranteed: if Acquire A returned fence F before Acquire B started, and B
// grants the key to another holder, then B's fence > F. The majority of
// B's granting nodes whose fences B's is at least shares a node with the
// majority that confirmed F; that node's counter was ≥ F before the value
// B found or made there was made, so that value was made with a fence > F,
// and carries it or another such choice (docs/safety.md, "Fences of twins",
// argues this and its one exception, in the safe direction). The argument
// needs no timing assumption, only that the shared node still has its
// counter, or let it expire: a counter expires only once the node's clock
// has passed it by FenceMargin, and a node votes at least its clock less
// FenceMargin, so after the expiry its vote is still > F unless its clock
// stepped back. The argument fails only when the node lost its data and is
// counted anyway (quarantine disabled, or the restart not seen by this
// process; then the clock-seeded fence is still > F unless that host's clock
// is behind the clock that produced F). So a fenced resource stays safe even
// when Redlock's mutual exclusion fails.
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
//     ErrTokenMismatch or ErrNotHeld what the token holds on a minority is
//     left to expire (lengthened to TTL where the extend found it), or to a
//     Release.
//   - Release (by its read) returns ErrTokenMismatch when mismatch ≥ q,
//     ErrNotHeld when ok + unknown < q, ErrUnavailable when ok < q, and
//     deletes nothing in those cases; else it deletes and returns nil when
//     q counted nodes deleted, ErrUnavailable otherwise. A node that did
//     not answer, and leftovers of a lease not held on a majority, keep
//     their part until it expires.
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
// restarted: the node is quarantined for MaxTTL + drift from that moment,
// which nothing shortens (docs/safety.md, "Restarted nodes", says why), and
// one warning is logged saying until when and what an operator can do;
// Nodes says the same for /readyz. No restart can slip between two
// operations: the old process's
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
	maxTTL      time.Duration
	quarantine  time.Duration // maxTTL + drift
	log         zerolog.Logger
	onVote      func(node, vote string)
	set         *nodeSet // the node list, as the nodes remember it (redlock_set.go)

	idMu   sync.Mutex // serializes the nodes' run_id checks (sameRedis)
	mu     sync.Mutex // guards closed, and bg.Add against Close's bg.Wait
	closed bool
	bg     sync.WaitGroup // background deletes on nodes that did not answer, warm-ups
	stop   chan struct{}  // closed by Close: ends the warm-ups
}

var _ Store = (*Redlock)(nil)

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
// DialerRetries is unset, a pool of at least 128 connections when PoolSize
// is unset, 4 KiB read and write buffers when unset, idle connections kept
// when ConnMaxIdleTime is unset, pipelines on that pool when
// PipelinePoolSize is unset, and
// (unless the restart
// guard is off) an OnConnect hook that runs after the caller's own.
//
// Each node is warmed up in the background (connections opened, scripts
// loaded): Ping counts a node only once it is warm, so a load balancer that
// waits for /readyz never sends a burst to cold connections.
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
		maxTTL:      maxTTL,
		quarantine:  maxTTL + drift(maxTTL),
		log:         opts.Logger,
		onVote:      opts.OnVote,
		stop:        make(chan struct{}),
	}
	seen := make(map[string]bool, len(nodes))
	for _, o := range nodes {
		if seen[o.Addr] {
			return nil, fmt.Errorf("lockstore: redlock node %s is listed twice", o.Addr)
		}
		seen[o.Addr] = true
	}
	var err error
	nodeQuarantine := r.quarantine // rule Q: a node found without a marker
	if opts.DisableRestartGuard {
		nodeQuarantine = 0
	}
	if r.set, err = newNodeSet(nodes, opts.NodeNames, nodeQuarantine); err != nil {
		return nil, err
	}
	for i, o := range nodes {
		o := *o
		o.MaxRetries = -1
		o.ContextTimeoutEnabled = true
		if o.DialerRetries <= 0 {
			o.DialerRetries = 1
		}
		// Every request takes one connection of every node for a round
		// trip; waiting for a free one eats into NodeTimeout, so the pool
		// is sized for bursts rather than for go-redis's default of 10 per
		// CPU.
		if o.PoolSize <= 0 {
			o.PoolSize = max(128, 10*runtime.GOMAXPROCS(0))
		}
		// Commands and replies are a few hundred bytes; go-redis's 32 KiB
		// buffers each way would make the warm pools 35 MiB of heap.
		if o.ReadBufferSize <= 0 {
			o.ReadBufferSize = 4 << 10
		}
		if o.WriteBufferSize <= 0 {
			o.WriteBufferSize = 4 << 10
		}
		// Batches (redlock_batch.go) are pipelines: run them on the pool the
		// warm-up fills, not on a pool of their own that would dial inside
		// a request's NodeTimeout.
		if o.PipelinePoolSize == 0 {
			o.PipelinePoolSize = -1
		}
		// The warm-up fills the pool; keep it filled through quiet hours.
		if o.ConnMaxIdleTime == 0 {
			o.ConnMaxIdleTime = -1
		}
		n := &redlockNode{addr: o.Addr}
		if !opts.DisableRestartGuard {
			o.OnConnect = r.onConnect(n, o.OnConnect)
		}
		n.client = redis.NewClient(&o)
		n.batch = newNodeBatch(n.client, r.nodeTimeout)
		// Grants carry rule D's deadline (clock.go) and go out with the
		// node list check in front (redlock_set.go).
		clk := newClocks(r.nodeTimeout, false)
		n.grant = clocked{Scripter: setGuard{Scripter: n.batch, set: r.set, i: i}, clocks: clk}
		n.semGrant = clocked{Scripter: setGuard{Scripter: n.client, set: r.set, i: i}, clocks: clk}
		n.batch.trace = newCmdTracer(opts.Tracer, o.Addr)
		n.batch.trace.hook(n.client)
		n.notifier = newNotifier(n.client)
		probe := o
		probe.OnConnect = nil
		// One connection at a time; the large pool size only keeps
		// go-redis's dial breaker (it stops dialing for a second after
		// PoolSize failed dials) shut for minutes of probing.
		probe.PoolSize, probe.MinIdleConns, probe.MaxIdleConns = 4096, 0, 1
		n.probe = redis.NewClient(&probe)
		r.nodes = append(r.nodes, n)
	}
	for _, n := range r.nodes {
		r.bg.Go(func() { r.warmUp(n) })
	}
	// The nodes' markers first, so that the first requests find them.
	r.markPass(max(250*time.Millisecond, 2*r.nodeTimeout))
	r.bg.Go(r.keepSet)
	return r, nil
}

// drift is Redlock's allowance for the clocks of the Redis hosts running
// at different rates: 1% of the TTL, plus 2 ms for timer granularity.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// background runs f unless the store is closing; Close waits for it.
func (r *Redlock) background(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.bg.Go(f)
	}
}

// Close implements Store. It waits for background deletes (each bounded by
// NodeTimeout) and warm-ups before closing the clients.
func (r *Redlock) Close() error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.stop)
	}
	r.mu.Unlock()
	r.bg.Wait()
	var errs []error
	for _, n := range r.nodes {
		n.notifier.close()
		errs = append(errs, n.client.Close(), n.probe.Close())
	}
	return errors.Join(errs...)
}
