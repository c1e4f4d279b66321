//go:build !race

// The simulator runs one goroutine at a time, so the race detector finds
// nothing in it, and slows its Lua interpreter several times over: make
// test runs it without -race (Makefile, test).

package lockstore

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The simulator on the `redis` backend (one node, N = 1): several gateways
// running the real Redis store code, clients taking, extending, renewing
// and releasing locks and permits of a few keys, through any gateway, with
// retries after 503 (same token), twins (one token through two gateways at
// once), fresh tokens, leases left to expire; the world (sim_world) delays,
// loses, duplicates and reorders their script calls and pauses the node.
// Every history is checked (sim_check). A failing seed prints its trace
// and the command that replays it.
//
//	go test -short ./lockstore -run TestSimRedis            100 000 requests
//	go test ./lockstore -run TestSimRedis -sim.seed 7 -v    one seed, its numbers
//	go test ./lockstore -run TestSimRedis -sim.duration 10m (make sim)
//	go test ./lockstore -run TestSimRedis -sim.control old-release
var (
	simSeed        = flag.Uint64("sim.seed", 0, "simulator: run only this seed")
	simFirst       = flag.Uint64("sim.first", 1, "simulator: the first seed of a run")
	simOps         = flag.Int("sim.ops", 0, "simulator: requests to run in all (default 100 000; make sim runs for a duration)")
	simDuration    = flag.Duration("sim.duration", 0, "simulator: run seeds until this much wall time has passed")
	simControlFlag = flag.String("sim.control", "", "simulator: undo this rule (a control; see simControls)")
)

// simSeedOps is how many requests one seed runs: short runs keep traces
// short and seeds many.
const simSeedOps = 2_000

type simConfig struct {
	control  string
	gateways int
	clients  int
	locks    []string
	sems     map[string]int // semaphore → limit
	ops      int            // requests to answer before the clients stop
	net      simNet
}

func defaultSimConfig() simConfig {
	return simConfig{gateways: 3, clients: 6, locks: []string{"k0", "k1"},
		sems: map[string]int{"s0": 1, "s1": 2}, ops: simSeedOps, net: defaultSimNet}
}

// simRun is one seed's outcome.
type simRun struct {
	seed      uint64
	ops       int
	calls     int
	late      int
	virtual   int64 // µs of virtual time
	violation *simViolation
	trace     string
	answers   map[string]int // "acquire 201", … : what the workload reached
}

func (r simRun) report() string {
	v := r.violation
	return fmt.Sprintf("seed %d: %s at %.3f ms on %s: %s\n%s", r.seed, v.check, float64(v.at-r.base())/1000, v.key, v.msg, r.trace)
}

func (r simRun) base() int64 { return 1_800_000_000_000_000 + int64(r.seed%1000)*1_000_000_000 }

// runSimRedis runs one seed.
func runSimRedis(seed uint64, cfg simConfig) simRun {
	hist := newSimHistory()
	hist.latest = simControls[cfg.control].latest
	w := newSimWorld(seed, 1, cfg.gateways, cfg.net, simScripts(simControls[cfg.control].scripts), hist)
	start := w.now
	for name, limit := range cfg.sems {
		hist.key(name, true, limit)
	}
	for _, name := range cfg.locks {
		hist.key(name, false, 1)
	}
	var clients []*simClient
	for i := range cfg.clients {
		c := &simClient{id: i, w: w, cfg: &cfg, holds: map[string]int64{}}
		c.newToken()
		clients = append(clients, c)
		w.after(w.r.Int64N(10_000), c.step)
	}
	for w.step() {
		if len(hist.violations) > 0 && w.ops < cfg.ops { // stop early: a finding
			cfg.ops = w.ops
		}
	}
	w.drain()
	hist.check()
	run := simRun{seed: seed, ops: w.ops, calls: w.calls, late: w.late, virtual: w.now - start, answers: map[string]int{}}
	for _, r := range hist.reqs {
		kind := r.kind
		if r.sem {
			kind = "sem " + kind
		}
		run.answers[kind+" "+r.answer]++
	}
	if v := hist.first(); v != nil {
		run.violation = v
		run.trace = hist.traceOf(v, run.base(), simTraceLen)
	}
	return run
}

type simClient struct {
	id          int
	w           *simWorld
	cfg         *simConfig
	token       string
	ntok        int
	outstanding int
	last        *simRequest
	holds       map[string]int64 // key → until when it believes it holds it
}

func (c *simClient) newToken() {
	c.ntok++
	c.token = fmt.Sprintf("c%d.t%d", c.id, c.ntok)
}

func (c *simClient) pickKey() (string, bool, int) {
	n := len(c.cfg.locks) + len(c.cfg.sems)
	i := c.w.r.IntN(n)
	if i < len(c.cfg.locks) {
		return c.cfg.locks[i], false, 1
	}
	i -= len(c.cfg.locks)
	for _, name := range []string{"s0", "s1", "s2", "s3"} {
		if limit, ok := c.cfg.sems[name]; ok {
			if i == 0 {
				return name, true, limit
			}
			i--
		}
	}
	panic("sim: no such key")
}

// step is the client's next move, once its last requests are answered.
func (c *simClient) step() {
	w := c.w
	if w.ops >= c.cfg.ops {
		return
	}
	r := w.r
	key, sem, limit := c.pickKey()
	held := make([]string, 0, len(c.holds)) // in order: a seed replays
	for k := range c.holds {
		held = append(held, k)
	}
	sort.Strings(held)
	for _, k := range held { // mostly work on what it holds
		if c.holds[k] > w.now && r.Float64() < 0.7 {
			key = k
			sem, limit = c.w.hist.keys[k].sem, c.w.hist.keys[k].limit
			break
		}
	}
	kind := "acquire"
	ttl := time.Duration(20+r.IntN(400)) * time.Millisecond
	n := 1
	switch {
	case c.last != nil && c.last.answer == "503" && r.Float64() < 0.6:
		// Retry what got no answer, with the same token.
		key, sem, kind, ttl = c.last.key, c.last.sem, c.last.kind, c.last.ttl
		limit = c.w.hist.keys[key].limit
	case c.holds[key] > w.now:
		switch x := r.Float64(); {
		case x < 0.35:
			kind, ttl = "extend", time.Duration(10+r.IntN(800))*time.Millisecond
		case x < 0.5:
			// A renewal: an acquire by the token that holds the key.
		case x < 0.85:
			kind = "release"
		default: // let it be, and maybe expire
			w.after(r.Int64N(300_000), c.step)
			return
		}
	case c.last != nil && c.last.answer == "503" && r.Float64() < 0.5:
		// A release of what it may hold after a 503.
		key, sem, kind = c.last.key, c.last.sem, "release"
		limit = c.w.hist.keys[key].limit
	default:
		if r.Float64() < 0.3 {
			c.newToken()
		}
	}
	if kind != "release" && r.Float64() < 0.12 {
		n = 2 // twins: one token through two gateways at once
	}
	if kind == "release" {
		c.holds[key] = 0
	}
	first := r.IntN(len(w.gws))
	for i := range n {
		gw := w.gws[(first+i)%len(w.gws)]
		req := &simRequest{client: c.id, gw: gw.id, kind: kind, key: key, sem: sem, token: c.token, ttl: ttl, atLeast: simAtLeast(w.r, kind, sem, ttl)}
		w.hist.sent(w.now, req, limit)
		c.outstanding++
		w.start(&simOp{req: req, gw: gw, call: simCallFor(gw.store, req, limit), done: c.answered})
	}
}

func (c *simClient) answered(op *simOp) {
	w, r := c.w, op.req
	r.answer = simAnswerOf(r.kind, op.ans, op.err)
	if r.answer == "201" || r.answer == "200" {
		r.fence = op.ans.fence
		r.expires = r.sent + op.ans.granted.Microseconds()
		if c.holds[r.key] < w.now {
			c.holds[r.key] = 0
		}
		c.holds[r.key] = max(c.holds[r.key], r.expires-simGrace)
	}
	w.hist.answered(w.now, r)
	c.last = r
	c.outstanding--
	if c.outstanding == 0 {
		think := w.r.Int64N(30_000)
		if strings.HasPrefix(r.answer, "409") { // held or full: come back later
			think = 20_000 + w.r.Int64N(200_000)
		}
		w.after(think, c.step)
	}
}

// simCallFor is the store call a request makes: the real code.
func simCallFor(s simStore, r *simRequest, limit int) func(context.Context) (simAnswer, error) {
	owner := fmt.Sprintf("c%d", r.client)
	switch {
	case !r.sem && r.kind == "acquire":
		return func(ctx context.Context) (simAnswer, error) {
			l, err := s.Acquire(ctx, r.key, AcquireRequest{Token: r.token, TTL: r.ttl, Owner: owner, HoldAtLeast: r.atLeast})
			return simAnswer{fence: l.Fence, granted: l.Granted, renewed: l.Renewed}, err
		}
	case !r.sem && r.kind == "extend":
		return func(ctx context.Context) (simAnswer, error) {
			l, err := s.Extend(ctx, r.key, r.token, r.ttl)
			return simAnswer{fence: l.Fence, granted: l.Granted}, err
		}
	case !r.sem:
		return func(ctx context.Context) (simAnswer, error) { return simAnswer{}, s.Release(ctx, r.key, r.token) }
	case r.kind == "acquire":
		return func(ctx context.Context) (simAnswer, error) {
			p, err := s.SemAcquire(ctx, r.key, PermitRequest{Token: r.token, TTL: r.ttl, Owner: owner, Limit: limit})
			return simAnswer{fence: p.Fence, granted: p.Granted, renewed: p.Renewed}, err
		}
	case r.kind == "extend":
		return func(ctx context.Context) (simAnswer, error) {
			p, err := s.SemExtend(ctx, r.key, r.token, r.ttl)
			return simAnswer{fence: p.Fence, granted: p.Granted}, err
		}
	}
	return func(ctx context.Context) (simAnswer, error) { return simAnswer{}, s.SemRelease(ctx, r.key, r.token) }
}

// simAnswerOf is the HTTP status the gateway would answer (handlers'
// table), in short.
func simAnswerOf(kind string, a simAnswer, err error) string {
	var held *HeldError
	var full *FullError
	var mismatch *LimitMismatchError
	switch {
	case err == nil && kind == "release":
		return "204"
	case err == nil && kind == "acquire" && !a.renewed:
		return "201"
	case err == nil:
		return "200"
	case errors.Is(err, ErrUnavailable):
		return "503"
	case errors.As(err, &held):
		return "409 held"
	case errors.As(err, &full):
		return "409 full"
	case errors.As(err, &mismatch):
		return "409 limit"
	case errors.Is(err, ErrNotHeld):
		return "404"
	case errors.Is(err, ErrTokenMismatch):
		return "409 token"
	}
	return "500 " + err.Error()
}

// simCPU is the CPU time the process used so far: what the simulator's
// speed is measured in, since a loaded machine stretches wall time.
func simCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// simBudget is how many requests a test runs in all.
func simBudget() int {
	if *simOps > 0 {
		return *simOps
	}
	// The short budget of 100 000 simulated requests is shared: the
	// `redis` model runs 80 000, the Redlock model rlBudget (20 000),
	// about 7 s and 12 s of CPU. make test runs the same as -short: -race
	// makes it slower, not surer.
	return 100_000 - rlBudget
}

// simSweep runs seeds from first until the budget (or -sim.duration) is
// spent or a seed fails; it returns the runs and the first failure.
func simSweep(t testing.TB, cfg simConfig, first uint64, budget int, duration time.Duration, stopAt func(simRun) bool) ([]simRun, *simRun) {
	// One goroutine runs at a time, handing control over channels. (Not
	// GOMAXPROCS(1), though a hand-over would be cheaper on one P: it is
	// the whole test binary's, and the package's other tests run beside.)
	var runs []simRun
	began := time.Now()
	ops := 0
	for seed := first; ; seed++ {
		if duration > 0 {
			if time.Since(began) > duration {
				break
			}
		} else if ops >= budget {
			break
		}
		run := runSimRedis(seed, cfg)
		runs = append(runs, run)
		ops += run.ops
		if run.violation != nil && (stopAt == nil || stopAt(run)) {
			return runs, &runs[len(runs)-1]
		}
	}
	return runs, nil
}

// logSweep reports a sweep's totals and speed (CPU time: a loaded machine
// stretches wall time), and with -v the answers by kind.
func logSweep(t *testing.T, runs []simRun, began time.Time, cpu time.Duration) {
	t.Helper()
	elapsed, used := time.Since(began), simCPU()-cpu
	ops, calls, late, virtual := simTotals(runs)
	t.Logf("%d seeds (%d … %d), %d requests, %d script calls (%d landed after their gateway gave up), %s virtual; %s wall, %s CPU: %.0f requests per CPU second",
		len(runs), runs[0].seed, runs[len(runs)-1].seed, ops, calls, late, simDur(virtual), elapsed.Round(time.Millisecond),
		used.Round(time.Millisecond), float64(ops)/used.Seconds())
	if testing.Verbose() {
		all := map[string]int{}
		for _, r := range runs {
			for k, n := range r.answers {
				all[k] += n
			}
		}
		var parts []string
		for k, n := range all {
			parts = append(parts, fmt.Sprintf("%s ×%d", k, n))
		}
		sort.Strings(parts)
		t.Logf("answers: %s", strings.Join(parts, ", "))
	}
}

func simTotals(runs []simRun) (ops, calls, late int, virtual int64) {
	for _, r := range runs {
		ops += r.ops
		calls += r.calls
		late += r.late
		virtual += r.virtual
	}
	return
}

// TestSimRedis runs the simulator without controls: no seed may find a
// violation.
func TestSimRedis(t *testing.T) {
	cfg := defaultSimConfig()
	cfg.control = *simControlFlag
	if _, ok := simControls[cfg.control]; !ok {
		t.Fatalf("no control %q", cfg.control)
	}
	began, cpu := time.Now(), simCPU()
	var runs []simRun
	var failed *simRun
	if *simSeed != 0 {
		runs, failed = simSweep(t, cfg, *simSeed, 1, 0, nil)
	} else {
		runs, failed = simSweep(t, cfg, *simFirst, simBudget(), *simDuration, nil)
	}
	logSweep(t, runs, began, cpu)
	if failed != nil {
		ctl := ""
		if cfg.control != "" {
			ctl = " -sim.control " + cfg.control
		}
		t.Fatalf("%s\nreplay: go test ./lockstore -run 'TestSimRedis$' -sim.seed %d%s -v", failed.report(), failed.seed, ctl)
	}
}

// simTraceLen is how many events of the failing key a report shows.
var simTraceLen = 60

// simStore is what simCallFor calls: a Redis or a Redlock.
type simStore interface {
	Store
	Semaphores
}

// simAtLeast is a lock acquire's HoldAtLeast: one in ten asks the key to
// stay held at least the lease's length after the grant, so that its
// releases leave lingering values (docs/safety.md, rule L).
func simAtLeast(r *rand.Rand, kind string, sem bool, ttl time.Duration) time.Duration {
	if kind != "acquire" || sem || r.Float64() >= 0.1 {
		return 0
	}
	return ttl
}
