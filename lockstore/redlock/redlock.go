package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgateway/lockgateway/internal/aside"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
)

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
type Options struct {
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
	// Previous, when set, makes this a transition gateway (docs/safety.md,
	// "Changing the node list", rule T): the node list the nodes served
	// before this one, whose majority every grant needs as well, until
	// the transition finished. PreviousURLs is the same as URLs, for
	// OpenRedlock; PreviousNodeNames names them as NodeNames does (a node
	// named as one of NodeNames is that node).
	Previous          []*redis.Options
	PreviousURLs      []string
	PreviousNodeNames []string
	// DisableRestartGuard turns restart detection and quarantine off. It
	// exists so tests can show what the guard prevents; never set it in
	// production.
	DisableRestartGuard bool
	// Tracer, when set, traces each node call a request makes (script/trace.go).
	Tracer trace.Tracer

	// spawn starts the node calls of a fan-out and a batch's next sends:
	// aside.Go by default. The simulator starts goroutines of their own,
	// inside its synctest bubble, where aside's shared workers cannot be.
	spawn func(func())
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
// # Rounds: what makes retries and stragglers safe
//
// A node call that times out may still run on the node later, after the
// operation answered its caller. So an acquire is two steps, as docs/safety.md
// ("The rules") states them with the proof that they keep one holder: each
// round, under a fresh random id, votes (acquire.lua), and a value it makes
// on a free node is provisional, naming the round as its maker and living
// only a short TTL; then the round confirms (confirm.lua) the fence it
// picked, with the lease's full TTL, on its granting nodes. Only a confirmed
// value is a lease: a failed round needs no clean-up (its values expire by
// themselves; withdrawing them at once, discard.lua, is for liveness only).
// Every write to a live value moves its expiry forward, and a release
// deletes only the value and expiry it read, so a late delete cannot remove
// a later grant or a lease an extend answered for. Grants and confirmations
// carry rule D's deadline (script/clock.go).
//
// # Acquire
//
// Granted when at least Nodes/2+1 counted nodes carry the round's fence
// confirmed and validity = TTL − elapsed − drift is positive, where elapsed
// runs on the monotonic clock from before the first call and drift =
// TTL/100 + 2 ms. ExpiresAt is the end of that validity: start + TTL − drift,
// which is the grant moment plus validity. Otherwise the round's provisional
// values are withdrawn (waiting only for the nodes that answered; the rest
// in the background under a fresh NodeTimeout) and Acquire answers:
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
// the round. The round's fence (lockFence) is the confirmed fence a
// majority of its granting nodes carry, if any (a renewal: Lease.Renewed,
// the fence as answered before), else the highest fence of their values; the
// confirmation raises each confirming node's counter to it. So a grant whose
// round started after another token's grant was answered with F carries a
// fence above F: its majority shares a node with the majority that confirmed
// F, whose value was made after that node's counter reached F. A sequential
// retry of the same token keeps its fence; twins (acquires of one token at
// once) may be answered different fences, each above every earlier holder's
// and below every later holder's. docs/safety.md, "Fences and retries",
// argues all three. The arguments need no timing assumption, only that the
// shared node kept its counter, or let it expire: a counter expires only
// once the node's clock has passed it by FenceMargin. A node that lost its
// data and is counted anyway (quarantine disabled, or the restart not seen)
// still votes from its clock. So a fenced resource stays safe even when
// Redlock's mutual exclusion fails.
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
type Store struct {
	nodes []*redlockNode
	// quorums are the node list and, during a transition until it
	// finished, the previous one (rule T); read them with q().
	quorums     atomic.Pointer[quorums]
	nodeTimeout time.Duration
	maxTTL      time.Duration
	quarantine  time.Duration // maxTTL + drift
	log         zerolog.Logger
	onVote      func(node, vote string)
	set         *nodeSet // the node list, as the nodes remember it (nodeset.go)

	idMu   sync.Mutex // serializes the nodes' run_id checks (sameRedis)
	mu     sync.Mutex // guards closed, and bg.Add against Close's bg.Wait
	closed bool
	bg     sync.WaitGroup // background deletes on nodes that did not answer, warm-ups
	// stopped ends when Close calls stop: the warm-ups, the probers and
	// the node list's keeper end with it.
	stopped context.Context
	stop    context.CancelFunc
	spawn   func(func()) // Options.spawn
	admit   *admission   // bounds the acquire rounds in flight (admit.go)
}

var _ lockstore.Store = (*Store)(nil)

// OpenRedlock returns a Redlock over the Redis masters at urls (redis:// or
// rediss://, one per node). It sets what Redlock relies on: timeouts of
// NodeTimeout, context deadlines honoured, no command retries (a retried
// release whose first attempt succeeded would report "not held"), one dial
// attempt per call, and no optional handshake round trips.
func Open(urls []string, opts Options) (*Store, error) {
	nodeTimeout := cmp.Or(opts.NodeTimeout, DefaultNodeTimeout)
	nodes, err := parseRedlockURLs(urls, nodeTimeout, "")
	if err != nil {
		return nil, err
	}
	if opts.PreviousURLs != nil {
		if opts.Previous, err = parseRedlockURLs(opts.PreviousURLs, nodeTimeout, "previous "); err != nil {
			return nil, err
		}
	}
	return New(nodes, opts)
}

func parseRedlockURLs(urls []string, nodeTimeout time.Duration, which string) ([]*redis.Options, error) {
	nodes := make([]*redis.Options, 0, len(urls))
	for i, u := range urls {
		o, err := redis.ParseURL(strings.TrimSpace(u))
		if err != nil {
			return nil, fmt.Errorf("lockstore: redlock %sURL %d: %w", which, i+1, err)
		}
		o.DialTimeout = nodeTimeout
		o.ReadTimeout = nodeTimeout
		o.WriteTimeout = nodeTimeout
		o.DisableIdentity = true
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		nodes = append(nodes, o)
	}
	return nodes, nil
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
func New(nodes []*redis.Options, opts Options) (*Store, error) {
	if len(nodes) < 3 {
		return nil, fmt.Errorf("lockstore: redlock needs at least 3 nodes, got %d", len(nodes))
	}
	if opts.Previous != nil && len(opts.Previous) < 3 {
		return nil, fmt.Errorf("lockstore: redlock needs at least 3 previous nodes, got %d", len(opts.Previous))
	}
	if opts.NodeTimeout < 0 || opts.MaxTTL < 0 {
		return nil, errors.New("lockstore: redlock NodeTimeout and MaxTTL must not be negative")
	}
	maxTTL := cmp.Or(opts.MaxTTL, DefaultMaxTTL)
	r := &Store{
		nodeTimeout: cmp.Or(opts.NodeTimeout, DefaultNodeTimeout),
		maxTTL:      maxTTL,
		quarantine:  maxTTL + script.Drift(maxTTL),
		log:         opts.Logger,
		onVote:      opts.OnVote,
		spawn:       opts.spawn,
	}
	r.admit = newAdmission(r.nodeTimeout)
	r.stopped, r.stop = context.WithCancel(context.Background())
	if r.spawn == nil {
		r.spawn = aside.Go
	}
	var err error
	nodeQuarantine := r.quarantine // rule Q: a node found without a marker
	if opts.DisableRestartGuard {
		nodeQuarantine = 0
	}
	if r.set, nodes, err = newNodeSet(nodes, opts.NodeNames, opts.Previous, opts.PreviousNodeNames, nodeQuarantine); err != nil {
		return nil, err
	}
	r.set.settle = r.quarantine
	r.set.maxTTL = maxTTL
	newList := quorums{newQuorumList(r.set.inList)}
	both := newList
	if r.set.transition() {
		both = append(both, newQuorumList(r.set.inPrev))
		// Once the transition finished, no lease of the previous list is
		// alive and no gateway of it grants: count by the new list alone,
		// as the new gateways do, so that a lease they released is not
		// read as held on a majority of the previous list (rule T).
		r.set.onFinish = func() { r.quorums.Store(&newList) }
	}
	r.quorums.Store(&both)
	seen := make(map[string]bool, len(nodes))
	for _, o := range nodes {
		if seen[o.Addr] {
			return nil, fmt.Errorf("lockstore: redlock node %s is listed twice", o.Addr)
		}
		seen[o.Addr] = true
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
		// Batches (script/batch.go) are pipelines: run them on the pool the
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
		n.functions = script.NewFunctions(n.client)
		n.client.AddHook(n.functions)
		n.batch = script.NewBatch(n.client, r.nodeTimeout)
		// Grants and deletes carry rule D's deadline (script/clock.go);
		// grants and lengthenings go out with the node list check in
		// front (nodeset.go).
		clk := script.NewClocks(r.nodeTimeout, false)
		n.writes = script.Clocked{Scripter: setGuard{Scripter: n.batch, set: r.set, i: i}, Clocks: clk}
		n.semWrites = script.Clocked{Scripter: setGuard{Scripter: n.client, set: r.set, i: i}, Clocks: clk}
		n.batch.Spawn = r.spawn
		n.batch.Trace = script.NewCmdTracer(opts.Tracer, o.Addr)
		n.batch.Trace.Hook(n.client)
		n.notifier = script.NewNotifier(n.client)
		probe := o
		probe.OnConnect = nil
		// One connection at a time; the large pool size only keeps
		// go-redis's dial breaker (it stops dialing for a second after
		// PoolSize failed dials) shut for minutes of probing.
		probe.PoolSize, probe.MinIdleConns, probe.MaxIdleConns = 4096, 0, 1
		n.probe = redis.NewClient(&probe)
		// Renewals have a client whose reads wait up to renewalWaitMax
		// (extend_batch.go); their context bounds each call to its
		// batch's wait. The restart guard runs on its connections too.
		renew := o
		renew.ReadTimeout, renew.WriteTimeout = renewalWaitMax, renewalWaitMax
		renew.DialTimeout = max(renew.DialTimeout, renewalWaitMax)
		n.renewals = redis.NewClient(&renew)
		n.batch.Trace.Hook(n.renewals)
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

// background runs f unless the store is closing; Close waits for it.
func (r *Store) background(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.bg.Go(f)
	}
}

// Close implements Store. It waits for background deletes (each bounded by
// NodeTimeout) and warm-ups before closing the clients.
func (r *Store) Close() error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		r.stop()
	}
	r.mu.Unlock()
	r.bg.Wait()
	var errs []error
	for _, n := range r.nodes {
		n.notifier.Close()
		errs = append(errs, n.client.Close(), n.probe.Close(), n.renewals.Close())
	}
	return errors.Join(errs...)
}
