//go:build chaos

package chaos_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/tools/chaos"
)

// The settings of every run: leases of 400 ms, at most 1.5 s (so a
// restarted Redlock node sits out 1.5 s, and leftovers are judged 1.5 s
// after the last request), a Redlock node timeout of 100 ms (the default
// 50 ms is tight on a 2-core machine running 5 Redis, 2 gateways, the
// proxies and the clients; a timeout is an availability matter, not a
// safety one).
const (
	ttl         = 400 * time.Millisecond
	maxTTL      = 1500 * time.Millisecond
	nodeTimeout = "100ms"
	clients     = 8
	// failoverTTL is a staged lease that must outlive a Sentinel failover
	// (about 2.5 s) and the old master's rejoining.
	failoverTTL = 8 * time.Second
)

var (
	gatewayBin string
	clockShim  string
	report     chaos.Report
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lockgateway-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if gatewayBin, err = chaos.BuildGateway(dir); err == nil {
		clockShim, err = redistest.BuildClockShim(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	start := time.Now()
	code := m.Run()
	took := time.Since(start)
	os.RemoveAll(dir)
	fmt.Printf("\n%s\n", report.Table())
	if path := os.Getenv("CHAOS_REPORT"); path != "" {
		if err := writeDoc(path, took); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: write report:", err)
			code = 1
		} else {
			fmt.Println("chaos: wrote", path)
		}
	}
	os.Exit(code)
}

// runsOf is how many times each scenario runs: $CHAOS_RUNS, default 2.
func runsOf() int {
	if n, err := strconv.Atoi(os.Getenv("CHAOS_RUNS")); err == nil && n > 0 {
		return n
	}
	return 2
}

// scenario is a fault schedule (and maybe a workload change) run on each
// of its backends.
type scenario struct {
	name     string
	backends []string
	desc     string // for docs/chaos-report.md
	// expect lists the checkers a known-unsafe control must trip; tolerate
	// the ones that may also trip. Every other checker must find nothing.
	expect, tolerate []string
	shim             bool // nodes run on the clock shim
	workload         func(r *run)
	fault            func(t *testing.T, r *run)
	// maxTTL replaces the default LOCKGW_MAX_TTL (a staged lease that must
	// outlive a failover is longer than 1.5 s)
	maxTTL time.Duration
	env    map[string]string // more LOCKGW_* settings for every gateway
	// cluster, when set, starts the run's nodes and gateways instead of
	// chaos.NewCluster (another number of nodes, gateways with node lists
	// of their own: holes_test.go).
	cluster func(t *testing.T, opts chaos.ClusterOptions) *chaos.Cluster
	// retryFences adds checkRetryFences (counted as fences): sequential
	// same-token retries keep their fence, every answer within its bounds.
	retryFences bool
	// extra names checkers the row runs beyond the report's columns; the
	// report shows their counts in the verdict.
	extra []string
}

// run is one run of a scenario.
type run struct {
	*chaos.Cluster
	w     *chaos.Workload
	extra []*chaos.Workload // more clients, started and stopped with w
	index int               // 0 for the first run of the scenario
	start time.Time
	notes []string // logged after the verdict
	// permits: what CheckPermits found (semaphore scenarios), for the
	// report; the lock checkers never see permits.
	permits []chaos.Violation
	// late, when set, judges the run once every workload has stopped,
	// with its whole history (holds: CheckHolds); what it finds is
	// reported with the other checkers'. extraOps counts requests the
	// history does not hold (holds' PUTs and DELETEs).
	late     func(ops []chaos.Op) []chaos.Violation
	extraOps int
}

// at sleeps until d after the workload started.
func (r *run) at(d time.Duration) { time.Sleep(time.Until(r.start.Add(d))) }

// redlock reports whether the run is on Redlock.
func (r *run) redlock() bool { return r.Opts.Backend == chaos.Redlock }

var (
	both        = []string{chaos.Redis, chaos.Redlock}
	redlockOnly = []string{chaos.Redlock}
	redisOnly   = []string{chaos.Redis}
	sentinel    = []string{chaos.Sentinel}
)

var scenarios = []scenario{
	{
		name: "contention", backends: both,
		desc:  "no fault: 8 clients contend for one key through both gateways, half of their acquires waiting (`wait_ms` up to 300 ms); holders extend 30% of the time and 5% of them pause past their lease before writing; in every scenario, a client retries half of the acquires whose answer it lost, with the same token",
		fault: func(t *testing.T, r *run) { r.at(6 * time.Second) },
	},
	{
		name: "many-keys", backends: both,
		desc: "16 clients on 8 keys, each key with its own fenced counter; Redlock: node 0 killed and restarted empty at once, node 3 stopped for 1 s, 40 ± 20 ms of latency between gateway 0 and node 4; Redis: the node stopped for 0.8 s, then latency between gateway 0 and it",
		workload: func(r *run) {
			r.w.Keys = []string{"m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7"}
			r.w.Clients = 16
		},
		fault: func(t *testing.T, r *run) {
			if r.redlock() {
				r.at(1500 * time.Millisecond)
				r.Nodes[0].Restart()
				r.at(3 * time.Second)
				r.Nodes[3].Pause()
				r.at(4 * time.Second)
				r.Nodes[3].Resume()
				r.at(4500 * time.Millisecond)
				require.NoError(t, r.Links[0][4].Latency(40, 20))
			} else {
				r.at(2 * time.Second)
				r.Nodes[0].Pause()
				r.at(2800 * time.Millisecond)
				r.Nodes[0].Resume()
				r.at(4 * time.Second)
				require.NoError(t, r.Links[0][0].Latency(40, 20))
			}
			r.at(6500 * time.Millisecond)
		},
	},
	{
		name: "kill-minority", backends: redlockOnly,
		desc: "SIGKILL node 1 at 1 s and node 3 at 2.5 s; they stay down",
		fault: func(t *testing.T, r *run) {
			r.at(time.Second)
			r.Nodes[1].Kill()
			r.at(2500 * time.Millisecond)
			r.Nodes[3].Kill()
			r.at(6 * time.Second)
		},
	},
	{
		name: "kill-majority", backends: both,
		desc: "Redlock: SIGKILL nodes 0, 1 and 2 at once, start them again empty 2 s later (both gateways see new run_ids and keep them out for the maximum TTL); Redis: SIGKILL the node (it stays down: starting it again empty is the restart-empty control)",
		fault: func(t *testing.T, r *run) {
			r.at(time.Second)
			if !r.redlock() {
				r.Nodes[0].Kill()
				r.at(4 * time.Second)
				return
			}
			for _, n := range r.Nodes[:3] {
				n.Kill()
			}
			r.at(3 * time.Second)
			for _, n := range r.Nodes[:3] {
				n.Start()
			}
			r.at(7 * time.Second)
		},
	},
	{
		name: "pause-node", backends: both,
		desc: "SIGSTOP a node for 1.2 s (3 TTLs), twice (Redlock: nodes 2 and 4); keys keep expiring by the wall clock while it is stopped, and it executes what queued up when it resumes",
		fault: func(t *testing.T, r *run) {
			a, b := 0, 0
			if r.redlock() {
				a, b = 2, 4
			}
			r.at(time.Second)
			r.Nodes[a].Pause()
			r.at(2200 * time.Millisecond)
			r.Nodes[a].Resume()
			r.at(3500 * time.Millisecond)
			r.Nodes[b].Pause()
			r.at(4700 * time.Millisecond)
			r.Nodes[b].Resume()
			r.at(6 * time.Second)
		},
	},
	{
		name: "semaphore", backends: both,
		desc: "besides the lock workload, 8 clients take permits of a limit-3 semaphore through both gateways (half waiting up to 300 ms, 30% extending); Redlock: SIGKILL node 1 at 1 s (it stays down), SIGSTOP node 3 from 2.5 s to 3.7 s; Redis: SIGSTOP the node from 2.5 s to 3.7 s; never more than 3 tokens believe they hold a permit, and no fence goes to two tokens",
		fault: func(t *testing.T, r *run) {
			semaphoreRun(t, r, 3, 3, func() {
				if !r.redlock() {
					r.at(2500 * time.Millisecond)
					r.Nodes[0].Pause()
					r.at(3700 * time.Millisecond)
					r.Nodes[0].Resume()
					r.at(6 * time.Second)
					return
				}
				r.at(time.Second)
				r.Nodes[1].Kill()
				r.at(2500 * time.Millisecond)
				r.Nodes[3].Pause()
				r.at(3700 * time.Millisecond)
				r.Nodes[3].Resume()
				r.at(6 * time.Second)
			})
		},
	},
	{
		name: "semaphore-twins", backends: both,
		desc: "as semaphore, but every acquire is sent twice at once with one token through both gateways (a client retrying a request it believes lost while the first is still in flight); Redlock: SIGKILL node 1 at 1 s (it stays down); never more than 3 tokens believe they hold a permit and no fence goes to two tokens; twins both granted with two different fences are counted in the log (a known gap, docs/safety.md \"Twins\")",
		fault: func(t *testing.T, r *run) {
			semaphoreRunWith(t, r, 3, 3, 1, func() {
				if r.redlock() {
					r.at(time.Second)
					r.Nodes[1].Kill()
				}
				r.at(5 * time.Second)
			})
		},
	},
	{
		name: "semaphore-control", backends: redlockOnly, expect: []string{"permits"},
		desc: "CONTROL. As semaphore, without faults, but every client passes limit 3 while the checker holds them to 2: the permits checker must see 3 holders at once",
		fault: func(t *testing.T, r *run) {
			semaphoreRun(t, r, 3, 2, func() { r.at(4 * time.Second) })
		},
	},
	{
		name: "restart-guarded", backends: redlockOnly,
		desc: "SIGKILL and restart at once, empty: node 2 during contention; then the staged case of restart-unguarded, with Q going through a gateway that saw the restart: H holds `s` on nodes 0-2 (gateway 0 cut off from 3 and 4), nodes 0 and 1 restart empty, and Q must not be granted `s`",
		fault: func(t *testing.T, r *run) {
			r.at(800 * time.Millisecond)
			r.Nodes[2].Restart()
			r.at(2 * time.Second)
			granted := doubleGrant(t, r.Cluster, 0, 1, "s", maxTTL, func() {
				require.NoError(t, r.Links[0][3].Blackhole())
				require.NoError(t, r.Links[0][4].Blackhole())
			}, func() {
				r.Nodes[0].Restart()
				r.Nodes[1].Restart()
				r.Links[0][3].Clear()
				r.Links[0][4].Clear()
			})
			assert.False(t, granted, "the restart guard must keep the restarted nodes from voting")
			r.at(6 * time.Second)
		},
	},
	{
		name: "latency-drop", backends: both,
		desc: "between gateway 1 and node 0, 1 s each: 30 ± 20 ms of latency, 150 ms of latency (beyond the Redlock node timeout), a blackhole (requests dropped), replies dropped (the node acts, the gateway never hears), connections reset; then healed",
		fault: func(t *testing.T, r *run) {
			l := r.Links[1][0]
			r.at(500 * time.Millisecond)
			require.NoError(t, l.Latency(30, 20))
			r.at(1500 * time.Millisecond)
			l.Clear()
			require.NoError(t, l.Latency(150, 0))
			r.at(2500 * time.Millisecond)
			l.Clear()
			require.NoError(t, l.Blackhole())
			r.at(3500 * time.Millisecond)
			l.Clear()
			require.NoError(t, l.DropReplies())
			r.at(4500 * time.Millisecond)
			l.Clear()
			require.NoError(t, l.Reset())
			r.at(5500 * time.Millisecond)
			l.Clear()
			r.at(6500 * time.Millisecond)
		},
	},
	{
		name: "pause-gateway", backends: both,
		desc: "SIGSTOP gateway 0 for 1 s (past the TTL) in the middle of an acquire, of an extend and of a release: each is stopped the moment it sends that operation's script to node 0 (a toxiproxy tap), while 3 clients contend for the same keys through gateway 1; the victim's client gives up after 600 ms on odd runs and waits for the late answer on even ones. Then gateway 1 is stopped for 1 s wherever it is",
		workload: func(r *run) {
			// The victims' keys get contenders of their own, through
			// gateway 1 only: gateway 0 carries nothing on them but the
			// victims' requests, so the tap stops it on exactly those.
			w2 := &chaos.Workload{
				Gateways: r.URLs[1:2], Keys: []string{"va", "ve", "vr"}, Clients: 3, TTL: ttl,
				Hold: 30 * time.Millisecond, Registers: r.w.Registers, History: r.History, Client: r.Client,
				Seed: r.w.Seed + 1,
			}
			r.w.Registers = map[string]*chaos.Register{}
			w2.Registers = r.w.Registers
			r.extra = append(r.extra, w2)
		},
		fault: pauseGateway,
	},
	{
		name: "abandon", backends: both,
		desc: "every request has a client timeout of 10-160 ms (half the acquires wait up to 300 ms), with 20 ± 15 ms of latency between gateway 1 and node 0 (and gateway 0 and node 3): requests are abandoned at every stage, waiting acquires included",
		workload: func(r *run) {
			r.w.Timeout = func(rnd *rand.Rand) time.Duration {
				return 10*time.Millisecond + time.Duration(rnd.Int64N(int64(150*time.Millisecond)))
			}
		},
		fault: func(t *testing.T, r *run) {
			require.NoError(t, r.Links[1][0].Latency(20, 15))
			if r.redlock() {
				require.NoError(t, r.Links[0][3].Latency(20, 15))
			}
			r.at(6 * time.Second)
		},
	},

	{
		name: "kill-gateway", backends: both,
		desc: "contention as above, with waits of up to 2 s; gateway 0 is killed (SIGKILL) 2 s in, while its clients wait in the key's queue, and stays down. Its tickets keep their place until its heartbeat lapses (3 s), then go as they reach the front; gateway 1's waiters carry on",
		workload: func(r *run) {
			r.w.Wait = 2 * time.Second
		},
		fault: func(t *testing.T, r *run) {
			r.at(2 * time.Second)
			r.Gateways[0].Kill()
			r.at(8 * time.Second)
			// Liveness: once the dead gateway's heartbeat has lapsed, its
			// tickets hold up nobody, so gateway 1 keeps granting.
			late := r.start.Add(5500 * time.Millisecond).UnixNano()
			granted := 0
			for _, op := range r.History.Ops() {
				if op.Gateway == 1 && op.Result == chaos.Granted && op.Call > late {
					granted++
				}
			}
			assert.Positive(t, granted, "no grant through gateway 1 after the dead gateway's heartbeat lapsed")
		},
	},

	{
		name: "holds", backends: both, maxTTL: holdsMaxTTL, extra: []string{"lost-late"},
		env:      map[string]string{"LOCKGW_HOLD_TTL": holdTTL.String()},
		desc:     "issue 28's holds: 6 clients hold 4 keys through streams (`ttl_ms` 2 s, renewed by the gateway every 667 ms; half wait up to 3 s; each lets go after up to 4 s, by a `DELETE` or by closing the stream) through both gateways, incrementing the key's fenced counter every 50 ms while they believe they hold it; 2 plain clients contend for the same keys. Staged: H holds a key through gateway 0, whose path to Redis (Redlock: to nodes 0-2) is then cut, and Q asks for it through gateway 1, waiting; the cut is restored once H stopped and Q holds. Then the same with gateway 1 stopped (SIGSTOP) instead of cut, resumed once H stopped by its own clock and Q holds; H reads on for 6 s to hear what gateway 1 says when it comes back. Then gateway 1's connections to Redis reset for 1 s, gateway 0 stopped for 500 ms, gateway 1 cut from Redis for 3 s, gateway 0 stopped for 3 s. Judged by what each holder heard (CheckHolds): a holder holds from its `acquired` event until a final event, its stream breaking, its letting go or the last `expires_at` it was told, whichever comes first, and no two holders (hold or plain lease) overlap (overlap); every `lost` arrived before the last `expires_at` its holder had been told (lost-late). Operations include each hold's `PUT` and `DELETE`",
		workload: holdsWorkload,
		fault:    func(t *testing.T, r *run) { holdsRun(t, r, 0, holdsSchedule) },
	},

	// Same-token requests racing each other and their own clean-up: a
	// client that retries with its token, a release still on the wire, an
	// extend that finds the lease gone.
	{
		name: "same-token-twins", backends: both,
		desc: "contention as above, but every acquire is sent twice at once with the same client-chosen token, through both gateways (a client retrying a request it believes lost while the first is still in flight); the client holds the lease if either twin was granted, and releases once",
		workload: func(r *run) {
			r.w.Twins = 1
		},
		fault: func(t *testing.T, r *run) { r.at(6 * time.Second) },
	},
	{
		name: "retry-after-503", backends: redlockOnly,
		desc: "a client retries a PUT with its own token after a 503, as docs/api.md says it may. Everything gateway 0 sends reaches the nodes 300 ms late (the clients' workload goes through gateway 1): its round times out (100 ms), it answers 503 and its clean-up is on its way to every node. The retry through gateway 1 is granted at once; then the first attempt's scripts and clean-up land, and Q tries to take the key through gateway 1 while the retry's lease is valid. Staged 3 times (up to 3 tries each until the first attempt answers 503 and the retry is granted)",
		workload: func(r *run) {
			r.w.Gateways = r.URLs[1:2] // gateway 0 carries only the staged requests
		},
		fault: func(t *testing.T, r *run) {
			r.at(500 * time.Millisecond)
			staged(t, r, "retry after 503", func(_ int, key string) (bool, bool) { return retryAfter503(t, r, key) })
			r.at(5 * time.Second)
		},
	},
	{
		name: "release-reacquire-slow-node", backends: redlockOnly,
		desc: "a release answered 204 while its part for a slow node is still on its way: H takes `s` through gateway 0, then what gateway 0 sends node 0 is held 300-500 ms (3-5 node timeouts): everything, or (every second staging) only the request that deletes the lock. H releases `s` through gateway 0 (204 from the other four nodes) and at once takes it again with the same token through gateway 1, which is cut off from nodes 3 and 4, so the grant rests on nodes 0-2, node 0 included. The cut heals and Q tries to take `s` through gateway 1 while that lease is valid (before the fix, the late release deleted it on node 0, and Q won nodes 0, 3 and 4). Staged 3 times, up to 3 tries each, during contention through both gateways",
		fault: func(t *testing.T, r *run) {
			r.at(500 * time.Millisecond)
			staged(t, r, "release and re-acquire", func(i int, key string) (bool, bool) { return releaseReacquire(t, r, key, i%2 == 1) })
			r.at(6 * time.Second)
		},
	},
	{
		name: "extend-vs-reacquire", backends: redlockOnly,
		desc: "an extend that finds the lease gone races a re-acquire with the same token. H takes `s` through gateway 0 and lets the lease expire; it extends through gateway 0, whose nodes' answers take 60 ms to come back, and 30 ms later re-acquires through gateway 1: the extend finds the key free everywhere and answers 404, and the re-acquire is granted while the extend is still in flight, before anything the extend does once it has its answers can land (before the fix, it released its token on every node). Q tries to take `s` through gateway 1 while the re-acquired lease is valid. Staged 3 times, up to 3 tries each, during contention through both gateways",
		fault: func(t *testing.T, r *run) {
			r.at(500 * time.Millisecond)
			staged(t, r, "extend vs re-acquire", func(_ int, key string) (bool, bool) { return extendReacquire(t, r, key) })
			r.at(6 * time.Second)
		},
	},

	{
		name: "late-writes", backends: redisOnly, maxTTL: 4 * time.Second,
		desc: "a write the gateway gave up on lands after later requests were answered (docs/safety.md, \"Late writes on redis\"): everything gateway 0 sends Redis is held 300-500 ms (its backend timeout is 150 ms), or (every third staging) only the request that deletes the lock. In turn: H's extend to 100 ms through gateway 0 (503), then to 3 s through gateway 1 (200); or H's release through gateway 0 (503), through gateway 1 (204), and a new grant to the same token through gateway 1 (201). Once the late write landed, Q tries to take the key through gateway 1 while H's last answer says it holds it (before the fix, the late extend cut the lease to 100 ms and the late release deleted the new grant). Each variant staged 6 times (up to 3 tries each), during contention through both gateways",
		env:  map[string]string{"LOCKGW_BACKEND_TIMEOUT": "150ms"},
		fault: func(t *testing.T, r *run) {
			r.at(500 * time.Millisecond)
			for i := range 6 {
				staged(t, r, "late write", func(_ int, key string) (bool, bool) { return lateWrite(t, r, key, i%3) })
			}
			r.at(8 * time.Second)
		},
	},
	{
		name: "failover-wait", backends: sentinel, maxTTL: failoverTTL,
		env:  map[string]string{"LOCKGW_REDIS_WAIT_REPLICAS": "1"},
		desc: "Sentinel with `LOCKGW_REDIS_WAIT_REPLICAS=1`: H holds `s` (granted once the replica acknowledged it), the master is killed (SIGKILL), the sentinels promote the replica, the old master rejoins as its replica, and Q tries to take `s` through the other gateway while H's lease is valid: it must not be granted. Then the control's staging (replica stopped before H asks): H is answered 503 and the grant taken back",
		fault: func(t *testing.T, r *run) {
			st := r.Sentinels
			r.at(time.Second)
			var took time.Duration
			granted := doubleGrant(t, r.Cluster, 0, 1, "s", failoverTTL, nil, func() {
				start := time.Now()
				killed := st.KillMaster()
				st.WaitFailover(killed)
				took = time.Since(start)
				st.Rejoin(killed) // Q's grant needs a replica to acknowledge it, or it could never be granted
			})
			assert.False(t, granted, "a lease the replica acknowledged survives the failover")
			r.notes = append(r.notes, fmt.Sprintf("failover: replica promoted %v after the kill", took.Round(time.Millisecond)))

			replica := st.CutReplica()
			h := r.record(r.Client.Acquire(r.URLs[0], "u", lockstore.NewToken(), failoverTTL, 0, 3*time.Second), 0)
			replica.Resume()
			assert.Equal(t, chaos.Unknown, h.Result, "with the replica stopped, a grant is answered 503")
			q, ok := acquireUntil(r.Cluster, 1, "u", ttl, time.Now().Add(3*time.Second).UnixNano())
			assert.True(t, ok, "the unacknowledged grant was taken back: the key is free")
			if ok {
				release(r.Cluster, 1, q)
			}
			r.at(time.Second + failoverTTL + 4*time.Second)
		},
	},

	// Known-unsafe controls: each must be caught.
	{
		name: "failover-nowait", backends: sentinel, maxTTL: failoverTTL,
		expect: []string{"overlap", "linearizability"}, tolerate: []string{"fences", "counter"},
		desc: "CONTROL. Sentinel without `LOCKGW_REDIS_WAIT_REPLICAS`: the replica is stopped (SIGSTOP) and the master drops its link to it, H takes `s` (answered at once, the grant on the master only), the master is killed, the replica resumes and is promoted without `s`, and Q takes `s` while H's lease is valid",
		fault: func(t *testing.T, r *run) {
			st := r.Sentinels
			r.at(time.Second)
			var replica, killed *redistest.Server
			cut := func() { replica = st.CutReplica() }
			granted := doubleGrant(t, r.Cluster, 0, 1, "s", failoverTTL, cut, func() {
				killed = st.KillMaster()
				replica.Resume()
				st.WaitFailover(killed)
			})
			assert.True(t, granted, "asynchronous replication loses a grant the master had not sent on")
			st.Rejoin(killed)
			r.at(time.Second + failoverTTL + 2*time.Second)
		},
	},
	{
		name: "clock-jump", backends: both, shim: true,
		expect: []string{"overlap", "linearizability"},
		desc:   "CONTROL. A node's wall clock is stepped 3 s forward (the clock shim; Redis expires keys and reads TIME by it). Redlock: H holds `s` on nodes 0-2 only (gateway 0 cut off from 3 and 4), node 2's clock jumps, the cut heals, and Q wins nodes 2-4 through gateway 1 while H's lease is valid. Redis: H holds `s`, the node's clock jumps, Q takes `s`",
		fault: func(t *testing.T, r *run) {
			r.at(time.Second)
			jump := 0
			before := func() {}
			if r.redlock() {
				jump = 2
				before = func() {
					require.NoError(t, r.Links[0][3].Blackhole())
					require.NoError(t, r.Links[0][4].Blackhole())
				}
			}
			granted := doubleGrant(t, r.Cluster, 0, 1, "s", maxTTL, before, func() {
				r.Nodes[jump].SetClock(3 * time.Second)
				r.Links[0][3%len(r.Nodes)].Clear()
				r.Links[0][4%len(r.Nodes)].Clear()
			})
			assert.True(t, granted, "a clock step must allow a second holder")
			r.at(4 * time.Second)
		},
	},
	{
		name: "restart-unseen", backends: redlockOnly,
		desc: "a restart that happened before a gateway first reached the node, which a gateway's memory of run_ids cannot see: H holds `s` on nodes 0-2 (gateway 0 cut off from 3 and 4), nodes 0 and 1 restart empty, a third gateway starts, and Q tries nodes 0, 1, 3 and 4 through it while H's lease is valid. The restarted nodes lost their node list marker, so the first gateway to reach them quarantines them on the node itself (docs/safety.md, rule Q), which every gateway sees; before rule Q this row was a control and Q won",
		fault: func(t *testing.T, r *run) {
			r.at(time.Second)
			granted := false
			for try := 0; try < 3 && !granted; try++ {
				granted = doubleGrant(t, r.Cluster, 0, len(r.URLs), "s", maxTTL, func() {
					require.NoError(t, r.Links[0][3].Blackhole())
					require.NoError(t, r.Links[0][4].Blackhole())
				}, func() {
					r.Nodes[0].Restart()
					r.Nodes[1].Restart()
					r.Links[0][3].Clear()
					r.Links[0][4].Clear()
					r.AddGateway()
				})
			}
			assert.False(t, granted, "a gateway that never saw the restart must not count the empty nodes")
			r.at(5 * time.Second)
		},
	},
	{
		name: "restarts-idle", backends: redlockOnly, maxTTL: 3 * time.Second, cluster: threeNodes(false),
		desc: "issue 26's hole 1, on three nodes: H takes `s` for 3 s through gateway 0 while node 2 is unreachable from it, so the lease rests on nodes 0 and 1; node 1 crashes and stays down, node 0 restarts empty and gateway 0 hears from it, node 1 comes back empty while gateway 0 is idle (the clients' workload goes through gateway 1), and 400 ms later Q tries `s` through gateway 0 until H's lease ends. Staged twice (then nodes 1 and 2 hold, node 0 is cut). Before the quarantine was never shortened, Q was granted 2 s after H (the horizon read of a peer that restarted unseen counted); now every restarted node sits out `LOCKGW_MAX_TTL` (rule Q), and with two of three nodes out nothing is granted until then",
		workload: func(r *run) {
			r.w.Gateways = r.URLs[1:2] // gateway 0 carries only the staged requests: idle
		},
		fault: func(t *testing.T, r *run) {
			assert.Zero(t, restartsIdle(t, r), "restarted nodes must not count while H's lease may rest on them")
			r.at(10 * time.Second)
		},
	},
	{
		name: "restarts-idle-unguarded", backends: redlockOnly, maxTTL: 3 * time.Second, cluster: threeNodes(true),
		expect: []string{"overlap", "linearizability"},
		desc:   "CONTROL. restarts-idle with both gateways opened with `DisableRestartGuard` (in the test process: the gateway's configuration has no such switch): no run_id memory, no quarantine on the node, so the restarted nodes count at once, as when a quarantine ends early; Q is granted while H holds `s`",
		workload: func(r *run) {
			r.w.Gateways = r.URLs[1:2]
		},
		fault: func(t *testing.T, r *run) {
			assert.NotZero(t, restartsIdle(t, r), "without the restart guard a restarted node counts at once")
			r.at(10 * time.Second)
		},
	},
	{
		name: "nodeset-change", backends: redlockOnly, cluster: nodeLists(false),
		desc: "issue 26's hole 4, a rolling deploy from {a,b,c} to {a,b,d}: two old gateways list a, b and c (nodes 0-2) and mark them, two new ones list a, b and d (node 3) and start next to them; the clients hammer all four. Staged 3 times: a is unreachable from the old gateways and b from the new ones, H takes `s` through an old gateway (on b and c) and Q tries it through a new one (a and d, a disjoint majority of its list) while H's lease is valid. The nodes remember the list they serve (rules C and W): the new gateways are refused, every request, with an error that names the difference, and grant nothing",
		fault: func(t *testing.T, r *run) {
			assert.Zero(t, nodesetChange(t, r, false), "a gateway with another node list must not grant")
		},
	},
	{
		name: "nodeset-change-blind", backends: redlockOnly, cluster: nodeLists(true),
		expect: []string{"overlap", "linearizability"},
		desc:   "CONTROL. nodeset-change with the node list check blinded: the new gateways name d as c in `LOCKGW_REDLOCK_NODE_NAMES` (no switch turns the check off), so their list looks like the old one and d joins it (quarantined for `LOCKGW_MAX_TTL` first, rule Q); then the old gateway grants `s` on {b,c} and the new one on {a,d}: two holders, as before nodes remembered the list",
		fault: func(t *testing.T, r *run) {
			assert.NotZero(t, nodesetChange(t, r, true), "two lists with disjoint majorities grant one key twice")
		},
	},
	{
		name: "nodeset-transition", backends: redlockOnly, cluster: oldList, maxTTL: transitionMaxTTL, extra: []string{"permits", "transition"},
		desc: "a change of the node list from {a,b,c} to {a,b,d} as docs/operations.md says (rule T), with `LOCKGW_MAX_TTL=5s` (the finish comes 5 s after begin, time for the steps before it on a loaded machine), while clients use whichever gateways run: 8 lock clients on 2 keys and 4 permit clients of a limit-3 semaphore per group of gateways. Two old gateways list {a,b,c} (nodes 0-2); at 1 s two transition gateways start with {a,b,d} and `LOCKGW_REDLOCK_PREVIOUS_URLS` {a,b,c} and begin (the nodes get `O>N`, d its quarantine), their own clients start, the old gateways' clients go on 300 ms (every node of O refuses them) and the old gateways stop (SIGTERM); c restarts empty (begun again, quarantined), and a gateway with {a,b,d} alone starts with 4 lock and 2 permit clients of its own: refused until the finish. 25 ± 15 ms of latency between transition gateway 3 and b, and between the new gateway and d; b stopped (SIGSTOP) for 1.2 s from 300 ms before the earliest finish, so the finish may find it silent. Once the transition finished (N on a, b and d, `LOCKGW_MAX_TTL` plus drift after begin), a restarts empty (joined with N, quarantined) and the clients run on 6 s (`LOCKGW_MAX_TTL` plus 1 s). Besides the usual checkers and the permits checker, the transition checker reads the markers on the nodes every 10 ms and holds rule T's promises to those bounds: no old gateway grants, renews or extends anything asked after a majority of {a,b,c} carried `O>N`, no old gateway's lease is valid when the first node gets N, and the new gateway grants nothing before a majority of {a,b,d} carried N. The row also asserts that the old gateways were asked after begin and the new one before the finish, that the new one granted after it, that the finish came no sooner than `LOCKGW_MAX_TTL` after begin, and that a, b and d end with N and c with `O>N`",
		workload: func(r *run) {
			r.w.Clients = 0 // the row's phases run the clients
			r.w.Keys = transitionKeys
		},
		fault: nodesetTransition,
	},
	{
		name: "clocks-offset", backends: redlockOnly, shim: true, cluster: aheadNodes, retryFences: true,
		desc: "issue 26's hole 3: nodes 3 and 4 run 3 s ahead of the gateways (started so: an offset, not a step) and are slow: 50 ± 40 ms from gateway 1 all along, 300 ms from gateway 0 during the staged grants. Staged 3 times (up to 3 tries each): H's PUT through gateway 0 is granted on nodes 0-2 with fence F (201) and answered before its votes land on 3 and 4, where they make values with higher fences (votes by a clock 3 s ahead); once they landed, H retries with its token through both gateways, one after the other: each must answer 200 with F. The clients send a third of their acquires as twins. Besides the usual checkers, every same-token answer is checked (counted as fences): a sequential retry keeps its fence, every answer (twins included) is above every earlier holder's fence and below every later one's (docs/api.md, Safe retries)",
		workload: func(r *run) {
			r.w.Twins = 0.3
		},
		fault: clocksOffset,
	},
	{
		name: "restart-empty", backends: redisOnly,
		expect: []string{"overlap", "linearizability"},
		desc:   "CONTROL. The single Redis is killed and started again empty while H holds `s`; Q takes `s`. Fences stay above (they are seeded from Redis TIME) and the fenced counter loses nothing",
		fault: func(t *testing.T, r *run) {
			r.at(time.Second)
			granted := doubleGrant(t, r.Cluster, 0, 1, "s", maxTTL, nil, r.Nodes[0].Restart)
			assert.True(t, granted, "a restart without persistence loses the lease")
			r.at(4 * time.Second)
		},
	},
	{
		name: "clock-behind-restart", backends: redisOnly, shim: true,
		expect: []string{"fences"}, tolerate: []string{"overlap", "linearizability"},
		desc: "CONTROL. The single Redis is killed and started again empty with its clock an hour behind: fences (max(counter+1, TIME in µs)) go backwards, the one case docs/api.md says they do not survive. The fenced counter refuses the lower fences and loses nothing",
		fault: func(t *testing.T, r *run) {
			r.at(1500 * time.Millisecond)
			r.Nodes[0].Kill()
			r.Nodes[0].SetClock(-time.Hour)
			r.Nodes[0].Start()
			r.at(4 * time.Second)
		},
	},
	{
		name: "no-fencing", backends: both,
		expect: []string{"counter"},
		desc:   "CONTROL. The counters accept any fence; 20% of holders pause past their lease before writing, and once, staged on key `n`, A pauses while B reads and writes. Updates are lost, while the lock itself stays correct",
		workload: func(r *run) {
			r.w.Pause = 0.2
			r.w.Registers = map[string]*chaos.Register{"k": chaos.NewRegister(false), "n": chaos.NewRegister(false)}
		},
		fault: func(t *testing.T, r *run) {
			r.at(500 * time.Millisecond)
			staleWrite(t, r.Cluster, r.w.Registers["n"], "n", ttl)
			r.at(5 * time.Second)
		},
	},
	{
		name: "holds-slow-stream", backends: redisOnly, maxTTL: holdsMaxTTL, extra: []string{"lost-late"},
		expect:   []string{"lost-late"},
		env:      map[string]string{"LOCKGW_HOLD_TTL": holdTTL.String()},
		desc:     "CONTROL. holds, with everything the gateways send the holders held 600 ms on its way (a toxiproxy between them: a buffering proxy, a slow network), and only the staged cut: the gateway says lost 200 ms before the end, and it arrives 400 ms after. The lost-late checker must catch it; no two holders, since each holder also stops by its own clock",
		workload: holdsWorkload,
		fault:    func(t *testing.T, r *run) { holdsRun(t, r, 600*time.Millisecond, holdsControlSchedule) },
	},
	{
		name: "persist-key", backends: both,
		expect: []string{"state"},
		desc:   "CONTROL. A lock key is made persistent (PERSIST) on a node that holds it, as a bug or an operator could",
		fault: func(t *testing.T, r *run) {
			r.at(time.Second)
			persistLock(t, r.Cluster, "p", ttl)
			r.at(3 * time.Second)
		},
	},
}

func TestChaos(t *testing.T) {
	for _, sc := range scenarios {
		for _, backend := range sc.backends {
			t.Run(sc.name+"/"+backend, func(t *testing.T) {
				for i := range runsOf() {
					t.Run(strconv.Itoa(i+1), func(t *testing.T) { runScenario(t, sc, backend, i) })
				}
			})
		}
	}
}

func runScenario(t *testing.T, sc scenario, backend string, i int) {
	opts := chaos.ClusterOptions{
		Backend: backend, Bin: gatewayBin, MaxTTL: maxTTL,
		Env: map[string]string{"LOCKGW_REDLOCK_NODE_TIMEOUT": nodeTimeout},
	}
	if sc.maxTTL > 0 {
		opts.MaxTTL = sc.maxTTL
	}
	maps.Copy(opts.Env, sc.env)
	if sc.shim {
		opts.ClockShim = clockShim
	}
	var c *chaos.Cluster
	if sc.cluster != nil {
		c = sc.cluster(t, opts)
	} else {
		c = chaos.NewCluster(t, opts)
	}
	r := &run{Cluster: c, index: i}
	r.w = &chaos.Workload{
		Gateways: c.URLs, Keys: []string{"k"}, Clients: clients, TTL: ttl,
		Hold: 30 * time.Millisecond, Wait: 300 * time.Millisecond, Extend: 0.3, Pause: 0.05, Retry: 0.5,
		History: c.History, Client: c.Client, Seed: uint64(time.Now().UnixNano()),
	}
	if sc.workload != nil {
		sc.workload(r)
	}

	c.Sample(200 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	waits := []func(){r.w.Start(ctx)}
	for _, w := range r.extra {
		waits = append(waits, w.Start(ctx))
	}
	r.start = time.Now()
	reported := false
	defer func() {
		c.Heal()
		cancel()
		for _, wait := range waits {
			wait()
		}
		if !reported { // the schedule failed midway
			report.Add(sc.name, backend, sc.expect, len(c.History.Ops()), nil, true, sc.extra...)
		}
	}()

	sc.fault(t, r)
	c.Heal()
	cancel()
	for _, wait := range waits {
		wait()
	}
	// Whatever a gateway still does ends within its backend timeout (1 s).
	c.Finish(time.Now().Add(time.Second))

	v := verdict(t, c, r.w.Registers, name(t), sc.expect, sc.tolerate)
	if sc.retryFences {
		rf := checkRetryFences(v.Ops)
		for i, x := range rf {
			if i < 5 {
				t.Logf("violation: %v", x)
			}
		}
		if !contains(sc.expect, "fences") && !contains(sc.tolerate, "fences") {
			assert.Empty(t, rf, "same-token fences (docs/api.md, Safe retries)")
		}
		v.Violations = append(v.Violations, rf...)
	}
	rejected := r.w.Rejected()
	for _, w := range r.extra {
		rejected += w.Rejected()
	}
	assert.Zero(t, rejected, "answers outside the API's lock statuses")
	if r.w.Twins > 0 {
		both, fences := r.w.TwinStats()
		t.Logf("twins both granted (201 or 200): %d (with two different fences: %d)", both, fences)
	}
	for _, note := range r.notes {
		t.Log(note)
	}
	var late []chaos.Violation
	if r.late != nil {
		late = r.late(v.Ops)
	}
	reported = true
	report.Add(sc.name, backend, sc.expect, len(v.Ops)+r.extraOps, slices.Concat(v.Violations, r.permits, late), t.Failed(), sc.extra...)
}

// pauseGateway stops gateway 0 in the middle of an acquire, an extend and
// a release on keys of their own, then gateway 1 wherever it is.
func pauseGateway(t *testing.T, r *run) {
	g := r.Gateways[0]
	tap := r.Links[0][0]
	// Odd runs give up before the gateway resumes; even ones wait for the
	// late answer.
	timeout := 3 * time.Second
	if r.index%2 == 0 {
		timeout = 600 * time.Millisecond
	}
	var stops, stoppedAt atomic.Int64
	stop := func() {
		g.Pause()
		stoppedAt.Store(time.Now().UnixNano())
		stops.Add(1)
		time.AfterFunc(time.Second, g.Resume)
	}
	record := func(op chaos.Op) chaos.Op {
		op.Client, op.Gateway = stagedClient, 0
		r.History.Add(op)
		return op
	}
	// victim sends one request through gateway 0 with the tap armed on its
	// key, then releases what it may hold through gateway 1 (a careful
	// client releases whenever it may hold the lock; an acquire whose
	// outcome is unknown leaves a token it never uses again).
	victim := func(kind chaos.Kind, key string) {
		var lease chaos.Op
		if kind != chaos.Acquire {
			var ok bool
			lease, ok = acquireUntil(r.Cluster, 0, key, ttl, time.Now().Add(5*time.Second).UnixNano())
			require.True(t, ok, "the victim never got %s", key)
		}
		before := stops.Load()
		require.NoError(t, tap.OnSend("{"+key+"}", stop))
		var res chaos.Op
		switch kind {
		case chaos.Acquire:
			res = record(r.Client.Acquire(r.URLs[0], key, lockstore.NewToken(), ttl, 0, timeout))
			lease = res
		case chaos.Extend:
			res = record(r.Client.Extend(r.URLs[0], key, lease.Token, ttl, timeout))
		case chaos.Release:
			res = record(r.Client.Release(r.URLs[0], key, lease.Token, timeout))
		}
		r.notes = append(r.notes, fmt.Sprintf("gateway 0 stopped in the middle of %s %s: %v (%v after the call); the client saw %s after %v",
			kind, key, stops.Load() > before, time.Duration(stoppedAt.Load()-res.Call).Round(time.Millisecond), res.Result, time.Duration(res.Return-res.Call).Round(time.Millisecond)))
		assert.GreaterOrEqual(t, time.Duration(res.Return-res.Call), 500*time.Millisecond,
			"gateway 0 answered %s %s while it should have been stopped", kind, key)
		if kind == chaos.Extend || res.Result == chaos.Granted {
			record(r.Client.Release(r.URLs[1], key, lease.Token, 2*time.Second))
		}
		tap.RemoveTaps()
		time.Sleep(1200 * time.Millisecond) // gateway 0 is back
	}

	r.at(time.Second)
	victim(chaos.Acquire, "va")
	victim(chaos.Extend, "ve")
	victim(chaos.Release, "vr")
	assert.Equal(t, int64(3), stops.Load(), "gateway 0 stopped in the middle of each operation")
	r.Gateways[1].Pause()
	time.Sleep(time.Second)
	r.Gateways[1].Resume()
	r.at(8 * time.Second)
}

// staged runs a staging of a same-token race 3 times, on keys s0, s1, s2,
// each up to 3 times until it ran as intended (exercised: the timing it
// needs held). stage reports whether it was exercised and whether Q was
// granted the key while the staged client held it. Q must never be; and at
// least one staging must have been exercised, or the run proved nothing.
func staged(t *testing.T, r *run, what string, stage func(i int, key string) (exercised, doubled bool)) {
	exercised := 0
	for i := range 3 {
		for try := range 3 {
			key := fmt.Sprintf("s%d", i)
			if try > 0 {
				key = fmt.Sprintf("s%d-%d", i, try)
			}
			ok, doubled := stage(i, key)
			assert.False(t, doubled, "%s on %s: Q was granted the key while the staged client held it", what, key)
			if ok {
				exercised++
				break
			}
		}
	}
	r.notes = append(r.notes, fmt.Sprintf("%s: %d of 3 stagings ran as intended", what, exercised))
	assert.NotZero(t, exercised, "%s: no staging ran as intended", what)
}

// record records a staged operation made through gateway gw.
func (r *run) record(op chaos.Op, gw int) chaos.Op {
	op.Client, op.Gateway = stagedClient, gw
	r.History.Add(op)
	return op
}

// warm gives gateway gw's pools idle connections to spare: a request on a
// new connection would first need the node's run_id, and behind a slow
// link that answer comes too late for the request to be sent at all.
func warm(r *run, gw int) {
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			k := fmt.Sprintf("warm%d", i)
			op := r.record(r.Client.Acquire(r.URLs[gw], k, lockstore.NewToken(), ttl, 0, 2*time.Second), gw)
			if op.Result == chaos.Granted {
				release(r.Cluster, gw, op)
			}
		})
	}
	wg.Wait()
}

// holds reports whether op gave the client the key.
func holds(op chaos.Op) bool { return op.Result == chaos.Granted || op.Result == chaos.Renewed }

// contend has Q try to take key through gateway 1 until lease (the staged
// client's) ends; it reports whether Q was granted while the lease was
// valid, and releases both.
func contend(t *testing.T, r *run, key string, lease chaos.Op) bool {
	q, ok := acquireUntil(r.Cluster, 1, key, ttl, lease.Expires)
	ok = ok && q.Return < lease.Expires
	if ok {
		time.Sleep(50 * time.Millisecond) // both believe they hold it for a while
		t.Logf("%s: staged lease %s fence %d until %s; Q %s fence %d from %s", key, lease.Result, lease.Fence,
			time.Unix(0, lease.Expires).Format("15:04:05.000"), q.Result, q.Fence, time.Unix(0, q.Return).Format("15:04:05.000"))
	}
	if q.Token != "" {
		release(r.Cluster, 1, q)
	}
	release(r.Cluster, 1, lease)
	return ok
}

// retryAfter503 stages a retry with the same token after a 503 whose
// clean-up is still on its way: everything gateway 0 sends is 300 ms late,
// so its round times out and answers 503; the retry through gateway 1 is
// granted at once, then the first attempt's scripts and clean-up land, and
// Q tries to take the key. It reports whether the staging ran as intended
// (a 503, then a granted retry) and whether Q was granted while the
// retry's lease was valid.
func retryAfter503(t *testing.T, r *run, key string) (exercised, doubled bool) {
	warm(r, 0)
	for _, l := range r.Links[0] {
		require.NoError(t, l.Delay(300))
	}
	token := lockstore.NewToken()
	first := r.record(r.Client.Acquire(r.URLs[0], key, token, maxTTL, 0, 3*time.Second), 0)
	retry := r.record(r.Client.Acquire(r.URLs[1], key, token, maxTTL, 0, 3*time.Second), 1)
	time.Sleep(500 * time.Millisecond) // the first attempt's scripts and releases land, in order
	for _, l := range r.Links[0] {
		l.Clear()
	}
	if first.Result != chaos.Unknown || !holds(retry) {
		t.Logf("%s: first attempt %s (wanted a 503), retry %s", key, first.Result, retry.Result)
		if retry.Token != "" && retry.Fence != 0 {
			release(r.Cluster, 1, retry)
		}
		return false, false
	}
	return true, contend(t, r, key, retry)
}

// releaseReacquire stages a release answered while its part for a slow
// node is still on its way there, followed at once by a re-acquire with the
// same token whose grant rests on a bare majority that includes that node.
// The slow node is node 0 as gateway 0 reaches it: everything is 300-500
// ms late, or, when onlyDelete, only the request that deletes the lock
// (the first that names the key's release channel) is held that long. It
// reports whether the staging ran as intended (the release answered 204
// before its late part could land, and the re-acquire was granted and had
// voted on node 0 before then) and whether Q was granted while the
// re-acquired lease was valid.
func releaseReacquire(t *testing.T, r *run, key string, onlyDelete bool) (exercised, doubled bool) {
	lat := time.Duration(300+rand.IntN(201)) * time.Millisecond // 3-5 node timeouts
	warm(r, 0)
	h, ok := acquireUntil(r.Cluster, 0, key, ttl, time.Now().Add(2*time.Second).UnixNano())
	if !ok {
		t.Logf("%s: H never got it", key)
		return false, false
	}
	slow := r.Links[0][0]
	var held atomic.Int64 // when the late part was held back (ns)
	if onlyDelete {
		require.NoError(t, slow.OnSend("lockgw:{"+key+"}:released", func() {
			held.Store(time.Now().UnixNano())
			time.Sleep(lat) // holds this link's requests, the delete first
		}))
	} else {
		require.NoError(t, slow.Latency(int(lat.Milliseconds()), 0))
	}
	// What the link holds must reach node 0 before the toxic goes:
	// removing one lets through at once what it held.
	defer func(at time.Time) {
		time.Sleep(time.Until(at))
		slow.Clear()
		slow.RemoveTaps()
	}(time.Now().Add(lat + 200*time.Millisecond))
	require.NoError(t, r.Links[1][3].Blackhole())
	require.NoError(t, r.Links[1][4].Blackhole())
	rel := release(r.Cluster, 0, h)
	re := r.record(r.Client.Acquire(r.URLs[1], key, h.Token, time.Second, 0, 2*time.Second), 1)
	r.Links[1][3].Clear()
	r.Links[1][4].Clear()
	landed := rel.Call + int64(lat) // the earliest the late part reaches node 0
	if onlyDelete {
		landed = held.Load() + int64(lat)
	}
	if (onlyDelete && held.Load() == 0) || rel.Result != chaos.Released || rel.Return >= landed ||
		!holds(re) || re.Call+int64(20*time.Millisecond) >= landed {
		t.Logf("%s: release %s after %v (held back: %v, lands %v after the call), re-acquire %s %v after the release's call",
			key, rel.Result, time.Duration(rel.Return-rel.Call).Round(time.Millisecond), !onlyDelete || held.Load() != 0,
			time.Duration(landed-rel.Call).Round(time.Millisecond), re.Result, time.Duration(re.Call-rel.Call).Round(time.Millisecond))
		if re.Token != "" && re.Fence != 0 {
			release(r.Cluster, 1, re)
		}
		return false, false
	}
	return true, contend(t, r, key, re)
}

// lateWrite stages one late write on the redis backend (the scenario
// late-writes): variant 0 a late extend to 100 ms after an extend to 3 s
// was answered; 1 a late release (everything gateway 0 sends held) after
// a release and a new grant to the same token were answered; 2 the same
// with only the release's delete held, so its read is answered and its
// delete lands late. It reports whether the staging ran as intended (the
// late request answered 503 and the later ones were answered before it
// could land) and whether Q was granted while H's last answer was valid.
func lateWrite(t *testing.T, r *run, key string, variant int) (exercised, doubled bool) {
	lat := time.Duration(300+rand.IntN(201)) * time.Millisecond
	warm(r, 0)
	h := r.record(r.Client.Acquire(r.URLs[1], key, lockstore.NewToken(), 3*time.Second, 0, 2*time.Second), 1)
	if h.Result != chaos.Granted {
		t.Logf("%s: H not granted: %s", key, h.Result)
		return false, false
	}
	slow := r.Links[0][0]
	var held atomic.Int64
	if variant == 2 {
		require.NoError(t, slow.OnSend("lockgw:{"+key+"}:released", func() {
			held.Store(time.Now().UnixNano())
			time.Sleep(lat)
		}))
	} else {
		require.NoError(t, slow.Delay(int(lat.Milliseconds())))
	}
	start := time.Now()
	defer func() {
		time.Sleep(time.Until(start.Add(lat + 200*time.Millisecond)))
		slow.Clear()
		slow.RemoveTaps()
	}()
	var late, lease chaos.Op
	if variant == 0 {
		late = r.record(r.Client.Extend(r.URLs[0], key, h.Token, 100*time.Millisecond, 2*time.Second), 0)
		lease = r.record(r.Client.Extend(r.URLs[1], key, h.Token, 3*time.Second, 2*time.Second), 1)
	} else {
		late = release(r.Cluster, 0, h)
		if rel := release(r.Cluster, 1, h); rel.Result != chaos.Released {
			t.Logf("%s: release through gateway 1: %s", key, rel.Result)
			return false, false
		}
		lease = r.record(r.Client.Acquire(r.URLs[1], key, h.Token, 3*time.Second, 0, 2*time.Second), 1)
	}
	landed := start.Add(lat).UnixNano()
	if variant == 2 {
		landed = held.Load() + int64(lat)
	}
	if late.Status != 503 || (variant == 2 && held.Load() == 0) || !(lease.Result == chaos.Extended || lease.Result == chaos.Granted) || lease.Return >= landed {
		t.Logf("%s: variant %d: late request %s (%d), later one %s; the late part lands %v after the start",
			key, variant, late.Result, late.Status, lease.Result, time.Duration(landed-start.UnixNano()).Round(time.Millisecond))
		if lease.Token != "" && lease.Fence != 0 {
			release(r.Cluster, 1, lease)
		}
		return false, false
	}
	time.Sleep(time.Until(time.Unix(0, landed).Add(50 * time.Millisecond)))
	return true, contend(t, r, key, lease)
}

// extendReacquire stages an extend that finds its lease gone racing a
// re-acquire with the same token: the extend's check reaches the nodes at
// once and finds the key free, but their answers take 60 ms to come back
// to gateway 0; 30 ms after the extend, the re-acquire goes through
// gateway 1 and is granted while the extend is still in flight, so
// whatever the extend does once it has its answers (the old code released
// its token on every node) lands after that grant. It reports whether the
// staging ran as intended (the extend answered 404, the re-acquire was
// granted before that answer) and whether Q was granted while the
// re-acquired lease was valid.
func extendReacquire(t *testing.T, r *run, key string) (exercised, doubled bool) {
	const delay = 60 * time.Millisecond
	h, ok := acquireUntil(r.Cluster, 0, key, ttl, time.Now().Add(2*time.Second).UnixNano())
	if !ok {
		t.Logf("%s: H never got it", key)
		return false, false
	}
	// Every node set PX ttl before it answered: by then the key is gone
	// everywhere.
	time.Sleep(time.Until(time.Unix(0, h.Return).Add(ttl + 20*time.Millisecond)))
	for _, l := range r.Links[0] {
		require.NoError(t, l.DelayReplies(int(delay.Milliseconds())))
	}
	var ext, re chaos.Op
	var wg sync.WaitGroup
	wg.Go(func() { ext = r.record(r.Client.Extend(r.URLs[0], key, h.Token, time.Second, 2*time.Second), 0) })
	wg.Go(func() {
		time.Sleep(delay / 2) // after the extend's check landed, before it has its answers
		re = r.record(r.Client.Acquire(r.URLs[1], key, h.Token, time.Second, 0, 2*time.Second), 1)
	})
	wg.Wait()
	for _, l := range r.Links[0] {
		l.Clear()
	}
	if ext.Result != chaos.NotHeld || !holds(re) || re.Return >= ext.Return {
		t.Logf("%s: extend %s after %v; re-acquire %s, sent %v after the extend and answered %v after it",
			key, ext.Result, time.Duration(ext.Return-ext.Call).Round(time.Millisecond), re.Result,
			time.Duration(re.Call-ext.Call).Round(time.Millisecond), time.Duration(re.Return-ext.Call).Round(time.Millisecond))
		if re.Token != "" && re.Fence != 0 {
			release(r.Cluster, 1, re)
		}
		return false, false
	}
	return true, contend(t, r, key, re)
}

// semaphoreRun runs a semaphore workload (clients passing limit) for as
// long as schedule takes, then checks its history against want: a
// permit-holder count above want is a violation, expected only when the
// clients pass more than want (a control).
func semaphoreRun(t *testing.T, r *run, limit, want int, schedule func()) {
	semaphoreRunWith(t, r, limit, want, 0, schedule)
}

// semaphoreRunWith is semaphoreRun with a share of twin acquires
// (SemWorkload.Twins), whose fences it checks too.
func semaphoreRunWith(t *testing.T, r *run, limit, want int, twins float64, schedule func()) {
	h := &chaos.History{}
	w := &chaos.SemWorkload{
		Gateways: r.URLs, Key: "sem", Limit: func(int) int { return limit }, Clients: clients,
		TTL: ttl, Hold: 30 * time.Millisecond, Wait: 300 * time.Millisecond, Extend: 0.3, Twins: twins,
		History: h, Client: r.Client, Seed: uint64(time.Now().UnixNano()),
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait := w.Start(ctx)
	schedule()
	cancel()
	wait()
	ops := h.Ops()
	v, most := chaos.CheckPermits(ops, want)
	if twins > 0 {
		// Logged, not a violation: under contention twins through two
		// gateways still split now and then (docs/safety.md, "Twins").
		both, split := w.TwinFences()
		t.Logf("semaphore twins both granted: %d (with two different fences: %d)", both, len(split))
		for _, x := range split {
			t.Logf("twin fences: %v", x)
		}
	}
	r.permits = v
	for i, x := range v {
		if i < 5 {
			t.Logf("violation: %v", x)
		}
	}
	granted := chaos.Count(ops, chaos.Acquire, chaos.Granted)
	t.Logf("semaphore: %d requests, %d permits granted, at most %d holders at once (limit %d, checked against %d)",
		len(ops), granted, most, limit, want)
	require.GreaterOrEqual(t, granted, 20, "too few permits granted to prove anything")
	if limit > want {
		assert.NotEmpty(t, v, "the permits checker must catch more than %d holders", want)
		return
	}
	assert.Empty(t, v, "more holders than the limit")
	assert.Greater(t, most, 1, "permits were held at once")
}
