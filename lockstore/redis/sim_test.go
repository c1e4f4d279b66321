//go:build !race

// The simulator runs one goroutine at a time, so the race detector finds
// nothing in it, and slows its Lua interpreter several times over: make
// test runs it without -race (Makefile, test).

package redis

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/lockgateway/lockgateway/lockstore/internal/sim"
	"github.com/redis/go-redis/v9"
)

type simConfig struct {
	control  string
	gateways int
	clients  int
	locks    []string
	sems     map[string]int // semaphore → limit
	ops      int            // requests to answer before the clients stop
	net      sim.Net
}

func defaultsimConfig() simConfig {
	return simConfig{gateways: 3, clients: 6, locks: []string{"k0", "k1"},
		sems: map[string]int{"s0": 1, "s1": 2}, ops: sim.SeedOps, net: sim.DefaultNet}
}

// runSimRedis runs one seed.
func runSimRedis(seed uint64, cfg simConfig) sim.Run {
	hist := sim.NewHistory()
	hist.Latest = simControls[cfg.control].latest
	w := sim.NewWorld(seed, 1, cfg.gateways, cfg.net, sim.RedisScripts(simControls[cfg.control].scripts), hist,
		func(c redis.UniversalClient, clocks *script.Clocks) sim.Store {
			return &Store{client: c, scripts: c, rooms: newRooms(), publish: script.PublishAll, mode: Single, clocks: clocks}
		})
	start := w.Now
	for name, limit := range cfg.sems {
		hist.Key(name, true, limit)
	}
	for _, name := range cfg.locks {
		hist.Key(name, false, 1)
	}
	var clients []*simClient
	for i := range cfg.clients {
		c := &simClient{id: i, w: w, cfg: &cfg, holds: map[string]int64{}}
		c.newToken()
		clients = append(clients, c)
		w.After(w.R.Int64N(10_000), c.step)
	}
	for w.Step() {
		if len(hist.Violations) > 0 && w.Ops < cfg.ops { // stop early: a finding
			cfg.ops = w.Ops
		}
	}
	w.Drain()
	hist.Check()
	run := sim.Run{Seed: seed, Ops: w.Ops, Calls: w.Calls, Late: w.Late, Virtual: w.Now - start, Answers: map[string]int{}}
	for _, r := range hist.Reqs {
		kind := r.Kind
		if r.Sem {
			kind = "sem " + kind
		}
		if r.Batch {
			kind += " (batch)"
		}
		run.Answers[kind+" "+r.Answer]++
	}
	if v := hist.First(); v != nil {
		run.Violation = v
		run.Trace = hist.TraceOf(v, run.Base(), sim.TraceLen)
	}
	return run
}

type simClient struct {
	id          int
	w           *sim.World
	cfg         *simConfig
	token       string
	ntok        int
	outstanding int
	last        *sim.Request
	holds       map[string]int64 // key → until when it believes it holds it
}

func (c *simClient) newToken() {
	c.ntok++
	c.token = fmt.Sprintf("c%d.t%d", c.id, c.ntok)
}

func (c *simClient) pickKey() (string, bool, int) {
	n := len(c.cfg.locks) + len(c.cfg.sems)
	i := c.w.R.IntN(n)
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
	if w.Ops >= c.cfg.ops {
		return
	}
	r := w.R
	key, sem, limit := c.pickKey()
	held := make([]string, 0, len(c.holds)) // in order: a seed replays
	for k := range c.holds {
		held = append(held, k)
	}
	sort.Strings(held)
	lapsed := false
	for _, k := range held { // mostly work on what it holds
		if c.holds[k] > w.Now && r.Float64() < 0.7 {
			key = k
			sem, limit = c.w.Hist.Keys[k].Sem, c.w.Hist.Keys[k].Limit
			break
		}
		// Or take again, with the same token, what it let lapse: a renewal
		// that came too late (rule S, and E's allowance from the other
		// side: the node may still hold what the client let go).
		if c.holds[k] > 0 && c.holds[k] <= w.Now && r.Float64() < 0.3 {
			key, lapsed = k, true
			sem, limit = c.w.Hist.Keys[k].Sem, c.w.Hist.Keys[k].Limit
			break
		}
	}
	kind := "acquire"
	ttl := time.Duration(20+r.IntN(400)) * time.Millisecond
	n := 1
	switch {
	case c.last != nil && c.last.Answer == "503" && r.Float64() < 0.6:
		// Retry what got no answer, with the same token.
		key, sem, kind, ttl = c.last.Key, c.last.Sem, c.last.Kind, c.last.TTL
		limit = c.w.Hist.Keys[key].Limit
	case c.holds[key] > w.Now:
		switch x := r.Float64(); {
		case x < 0.35:
			kind, ttl = "extend", time.Duration(10+r.IntN(800))*time.Millisecond
		case x < 0.5:
			// A renewal: an acquire by the token that holds the key.
		case x < 0.85:
			kind = "release"
		default: // let it be, and maybe expire
			w.After(r.Int64N(300_000), c.step)
			return
		}
	case c.last != nil && c.last.Answer == "503" && r.Float64() < 0.5:
		// A release of what it may hold after a 503.
		key, sem, kind = c.last.Key, c.last.Sem, "release"
		limit = c.w.Hist.Keys[key].Limit
	default:
		if !lapsed && r.Float64() < 0.3 {
			c.newToken()
		}
	}
	if kind != "release" && r.Float64() < 0.12 {
		n = 2 // twins: one token through two gateways at once
	}
	if kind == "release" {
		c.holds[key] = 0
	}
	first := r.IntN(len(w.Gateways))
	for i := range n {
		gw := w.Gateways[(first+i)%len(w.Gateways)]
		req := &sim.Request{Client: c.id, Gw: gw.ID, Kind: kind, Key: key, Sem: sem, Token: c.token, TTL: ttl, AtLeast: sim.HoldAtLeast(w.R, kind, sem, ttl), Batch: sim.Batched(w.R, kind)}
		w.Hist.Sent(w.Now, req, limit)
		c.outstanding++
		w.Start(&sim.Op{Req: req, Gw: gw, Call: sim.CallFor(gw.Store, req, limit), Done: c.answered})
	}
}

func (c *simClient) answered(op *sim.Op) {
	w, r := c.w, op.Req
	r.Answer = sim.AnswerOf(r.Kind, op.Result, op.Err)
	if r.Answer == "201" || r.Answer == "200" {
		r.Fence = op.Result.Fence
		// The expires_at the client was told (rule E), on the gateway's
		// clock, which is the world's.
		r.Expires = op.Result.ExpiresAt.UnixMicro()
		if simControls[c.cfg.control].noDrift {
			r.Expires += script.Drift(op.Result.Granted).Microseconds()
		}
		if c.holds[r.Key] < w.Now {
			c.holds[r.Key] = 0
		}
		c.holds[r.Key] = max(c.holds[r.Key], r.Expires-sim.Grace)
	}
	w.Hist.Answered(w.Now, r)
	c.last = r
	c.outstanding--
	if c.outstanding == 0 {
		think := w.R.Int64N(30_000)
		if strings.HasPrefix(r.Answer, "409") { // held or full: come back later
			think = 20_000 + w.R.Int64N(200_000)
		}
		w.After(think, c.step)
	}
}

// TestSimRedis runs the simulator without controls: no seed may find a
// violation.
func TestSimRedis(t *testing.T) {
	cfg := defaultsimConfig()
	cfg.control = *sim.Control
	if _, ok := simControls[cfg.control]; !ok {
		t.Fatalf("no control %q", cfg.control)
	}
	began, cpu := time.Now(), sim.CPU()
	var runs []sim.Run
	var failed *sim.Run
	if *sim.Seed != 0 {
		runs, failed = simSweep(t, cfg, *sim.Seed, 1, 0, nil)
	} else {
		runs, failed = simSweep(t, cfg, *sim.First, sim.Budget(), *sim.Duration, nil)
	}
	sim.LogSweep(t, runs, began, cpu)
	if failed != nil {
		ctl := ""
		if cfg.control != "" {
			ctl = " -sim.control " + cfg.control
		}
		t.Fatalf("%s\nreplay: go test ./lockstore/redis -run 'TestSimRedis$' -sim.seed %d%s -v", failed.Report(), failed.Seed, ctl)
	}
}

// simSweep runs seeds from first until the budget (or -sim.duration) is
// spent or a seed fails; it returns the runs and the first failure.
func simSweep(t testing.TB, cfg simConfig, first uint64, budget int, duration time.Duration, stopAt func(sim.Run) bool) ([]sim.Run, *sim.Run) {
	// One goroutine runs at a time, handing control over channels. A
	// hand-over is cheaper on one P, so make test and make sim run the
	// simulator with -cpu 1; the test does not set GOMAXPROCS itself: it
	// is the whole test binary's, and go test -short runs the package's
	// other tests in the same binary.
	var runs []sim.Run
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
		ops += run.Ops
		if run.Violation != nil && (stopAt == nil || stopAt(run)) {
			return runs, &runs[len(runs)-1]
		}
	}
	return runs, nil
}
