//go:build !race

// The simulator runs one goroutine at a time, so the race detector finds
// nothing in it, and slows its Lua interpreter several times over: make
// test runs it without -race (Makefile, test).

package redlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockgateway/lockgateway/internal/luaredis"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/lockgateway/lockgateway/lockstore/internal/sim"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// The simulator on the `redlock` backend: N = 3 or 5 nodes, several
// gateways, each a real *Redlock (NewRedlock, its own go-redis clients to
// every node), clients as in the `redis` model (lockstore/redis/sim_test.go: same-token
// retries after a 503, twins through two gateways, renewals, extends,
// releases, leases left to expire), and, besides the `redis` model's
// faults (sim_world_test.go): node crashes that lose the node's data and come
// back with a new run_id, node clocks with an offset and a rate (A3),
// the link between one gateway and one node cut for a while (rlNet.pCut),
// gateway processes replaced mid-run (a new process trusts the first
// run_id it sees: rule Q must cover it), and a gateway deployed mid-run
// with another node list over shared nodes (rule C: it must be refused).
// The same checkers (sim.History) read every history, and, after each
// seed, a quiet stretch checks that a healthy majority grants (liveness).
//
//	go test ./lockstore/redlock -run 'TestSimRedlock$' -v               the short budget
//	go test ./lockstore/redlock -run 'TestSimRedlock$' -sim.seed 7 -v    one seed
//	go test ./lockstore/redlock -run 'TestSimRedlock$' -sim.duration 10m (make sim)

// rlSeedOps is how many requests one Redlock seed runs.
const rlSeedOps = 600

type rlConfig struct {
	control  string
	nodes    int // N, the list's size
	gateways int
	clients  int
	locks    []string
	sems     map[string]int
	ops      int
	altList  bool // deploy a gateway with another node list mid-run
	// transition changes the node list mid-run (docs/safety.md, rule T): a
	// transition gateway (the other list, this one as its previous) comes
	// up, the old gateways stop once it is ready, and a gateway with the
	// other list alone comes up a little later.
	transition bool
	// strictRetry checks docs/api.md's fence promises to a token that
	// holds the key: a sequential retry and an extend answer its fence, a
	// 201 to it a higher one (sim.History.OwnFences).
	strictRetry bool
	net         rlNet
}

func defaultRLConfig(seed uint64) rlConfig {
	n := 3
	if seed%3 == 0 {
		n = 5
	}
	return rlConfig{nodes: n, gateways: 3, clients: 5, locks: []string{"k0", "k1"},
		sems: map[string]int{"s0": 1, "s1": 2}, ops: rlSeedOps, altList: seed%2 == 0, transition: seed%4 == 1, net: defaultRLNet}
}

type rlGateway struct {
	id        int
	list      []int // node indexes
	prev      []int // a transition gateway's previous list (rule T)
	store     *Store
	gen       int // processes so far
	slowUntil int64
	alt       bool
	old       bool // of the list a transition replaces
	retired   bool // stopped for good: the transition began
}

type rlOp struct {
	id    int
	req   *sim.Request
	gw    *rlGateway
	call  func(context.Context) (sim.Result, error)
	ans   sim.Result
	err   error
	done  func(*rlOp)
	store *Store
}

// rlControl undoes one Redlock rule: by an option, or by the scripts the
// nodes run instead (by name, as simControls).
type rlControl struct {
	scripts map[string]string
	opts    func(*Options)
	want    string
	// crashes multiplies the nodes' crash rate: a control of the restart
	// rules needs restarts to show within the short budget.
	crashes float64
	// batchAll sends every extend as a hold renewer's batch, so that what
	// the control finds, it finds through the batch's answers.
	batchAll bool
}

var rlControls = map[string]rlControl{"": {}}

func init() {
	// restart-guard: RedlockOptions.DisableRestartGuard, the run_id check
	// and rule Q's quarantine both off.
	rlControls["restart-guard"] = rlControl{want: "one-holder|limit|fence-order", crashes: 4,
		opts: func(o *Options) { o.DisableRestartGuard = true }}
	// rule-q: a join does not write the node's quarantine (rule Q); the
	// gateways' run_id guard stays on.
	rlControls["rule-q"] = rlControl{want: "one-holder|limit|fence-order", scripts: map[string]string{
		"nodeset_mark.lua": sim.MustReplace(script.NodesetMarkLua, "    redis.call('SET', KEYS[2], '1', 'PX', math.max(tonumber(ARGV[4]), longest))\n", ""),
	}}
	// nodeset: the node-list check off, on the nodes (nodeset.lua runs any
	// caller's list) and in the marking passes (a node never reports a
	// marker, so no gateway closes).
	rlControls["nodeset"] = rlControl{want: "one-holder|limit|fence-order", scripts: map[string]string{
		"nodeset.lua":      sim.MustReplace(script.NodesetLua, "if nodeset_have ~= nodeset_list and", "if false and"),
		"nodeset_mark.lua": sim.MustReplace(script.NodesetMarkLua, "return {have or '', settle}", "return {'', settle}"),
	}}
	// transition-early: begin writes no settle key (rule T), so a
	// transition finishes at its next pass, while leases of the old list
	// may be alive.
	rlControls["transition-early"] = rlControl{want: "transition-settled|one-holder|limit|fence-order", scripts: map[string]string{
		"nodeset_mark.lua": sim.MustReplace(script.NodesetMarkLua, "    redis.call('SET', KEYS[3], '1', 'PX', math.max(tonumber(ARGV[7]), longest))\n", ""),
	}}
	// no-linger: release.lua never lingers (rule L undone): a release
	// before the hold-at-least end frees the key at once.
	rlControls["no-linger"] = rlControl{want: "at-least", scripts: map[string]string{
		"release.lua": sim.NoLinger(),
	}}
	// linger-capped: a release's lingering value ends with the lease it
	// replaces, not at the hold-at-least end: the key is freed early only
	// when the hold-at-least is longer than the lease.
	rlControls["linger-capped"] = rlControl{want: "at-least", scripts: map[string]string{
		"release.lua": sim.LingerCapped(),
	}}
	// linger-unread: release.lua ignores ARGV[8], the longest time to T
	// the release's reads found: a node whose copy lacks T (a renewal's
	// value that stayed provisional) is deleted, not made to linger.
	// Not found by the simulator yet: its staging (a grant with a hold-at-
	// least longer than its TTL that misses a node, a renewal through
	// another gateway that reaches it, a release that misses another node)
	// did not come up in 60,000 requests, with link cuts three times as
	// likely and hold-at-least drawn five times as often either.
	// TestSimRedlockRenewalCopyWithoutT stages it in the simulator
	// (sim_scenario_test.go), TestReviewRedlockRenewalDropsHoldAtLeast on
	// real nodes.
	rlControls["linger-unread"] = rlControl{want: "at-least", scripts: map[string]string{
		"release.lua": script.DeadlineLua + sim.MustReplace(script.ReleaseLua,
			"if ARGV[7] == '1' and (tonumber(ARGV[8] or '0') or 0) > 0 then", "if false then"),
	}}
	// pair-blind: release.lua deletes the token's value whatever pair its
	// read found (rule V2's compare undone). Found: a twin PUT's failed
	// round, cleaning up, deleted on two of five nodes the value its other
	// twin's round had confirmed since the read and been answered 201
	// for; a newcomer was granted 13 ms later. Rarer than the short
	// budget: found at seed 416 (-sim.first 300, after 72,825 requests)
	// and at seed 708 (-sim.first 659, after 31,114).
	rlControls["pair-blind"] = rlControl{want: "one-holder|fence-order", scripts: map[string]string{
		"release.lua": script.DeadlineLua + sim.MustReplace(script.ReleaseLua, "if cur ~= ARGV[5] or redis.call('PEXPIRETIME', KEYS[1]) ~= tonumber(ARGV[6]) then", "if false then"),
	}}
	// extend-other: extend.lua lengthens the key whatever token holds it,
	// and answers it extended; every extend goes as a batch (ExtendBatch,
	// SemExtendBatch), so the checks must find it in the batch's answers.
	rlControls["extend-other"] = rlControl{want: "one-holder|limit", batchAll: true, scripts: map[string]string{
		"extend.lua": sim.MustReplace(script.ExtendLua, "if string.sub(cur, 1, 64) ~= ARGV[1] then\n  return gone(-1)", "if false then\n  return gone(-1)"),
	}}
	// grant-held: acquire.lua grants a key another token holds (the check).
	rlControls["grant-held"] = rlControl{want: "one-holder", scripts: map[string]string{
		"acquire.lua": script.DeadlineLua + sim.MustReplace(script.AcquireLua, "if cur then\n  return {0, redis.call('PTTL', KEYS[1]), is_head}",
			"if cur and string.sub(cur, 1, 64) == ARGV[1] then\n  return {0, redis.call('PTTL', KEYS[1]), is_head}\nend\nif cur then\n  redis.call('DEL', KEYS[1])"),
	}}
	// withdraw-confirmed: discard.lua withdraws a round's value even once
	// confirmed (docs/safety.md, fact M undone): a failed twin takes a
	// node away from the lease its twin confirmed and was answered for.
	// Rarer than the short budget: found at seed 5 with -sim.ops 100000
	// (-sim.control withdraw-confirmed).
	rlControls["withdraw-confirmed"] = rlControl{want: "one-holder|fence-order", scripts: map[string]string{
		"discard.lua": sim.MustReplace(script.DiscardLua, "if maker ~= ARGV[2] or plus == '++' then", "if maker ~= ARGV[2] then"),
	}}
	// permit-residue: R1 of docs/safety.md, "Fences of permits", undone: a permit's fence is not raised to its slot's
	// residue, so permits held at once can share one. Rarer than the short
	// budget: found at seed 27 after 16 881 requests (-sim.ops 150000).
	rlControls["permit-residue"] = rlControl{want: "fence-unique", scripts: map[string]string{
		"sem_acquire.lua": script.DeadlineLua + sim.MustReplace(script.SemCommonLua, "  return f + r\n", "  return f\n") + script.SemAcquireLua,
	}}
}

// rlScripts are the scripts a Redlock sends, by the SHA-1 it names, plain
// and behind nodeset.lua (nodeset.go), with a control's substitutions.
func rlScripts(subst map[string]string) map[string]sim.Script {
	out := map[string]sim.Script{}
	get := func(name, src string) string {
		if s, ok := subst[name]; ok {
			return s
		}
		return src
	}
	guard := get("nodeset.lua", script.NodesetLua)
	for _, name := range []string{"acquire.lua", "extend.lua", "release.lua", "clock.lua", "inspect.lua", "confirm.lua", "discard.lua",
		"sem_acquire.lua", "sem_extend.lua", "sem_release.lua", "sem_read.lua", "sem_inspect.lua", "sem_confirm.lua", "sem_discard.lua", "nodeset_mark.lua"} {
		src := script.Sources[name]
		run := get(name, src)
		out[luaredis.Sha1(src)] = sim.Script{Name: name, Src: run}
		out[luaredis.Sha1(script.NodesetLua+src)] = sim.Script{Name: name, Src: guard + run}
	}
	return out
}

func nodeAddr(i int) string { return fmt.Sprintf("n%d:6379", i) }

// newStore starts gateway g's next process: in a goroutine of its own
// (NewRedlock marks the nodes before it returns), which hands the store
// to the world when it is ready.
func (w *rlWorld) newStore(g *rlGateway, ctl rlControl, ready func(*Store)) {
	g.gen++
	kind := fmt.Sprintf("p%d", g.gen)
	var opts []*redis.Options
	for _, i := range g.list {
		opts = append(opts, &redis.Options{Addr: nodeAddr(i), Dialer: w.dial(g.id, kind), PoolSize: 18,
			DialTimeout: 20 * time.Millisecond, ReadTimeout: 20 * time.Millisecond, WriteTimeout: 20 * time.Millisecond,
			DisableIdentity: true, MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	}
	// The quarantine of a restarted node (MaxTTL) outlasts the spread of
	// the nodes' clocks plus the fence margin: a node counted again after a
	// restart votes from its clock, and the fences it must stay above were
	// voted by clocks up to the spread ahead (docs/safety.md, "Why fences
	// rise", its assumption). With MaxTTL 1 s and offsets of ±3 s the
	// simulator found a permit answered a fence below an earlier holder's
	// after such a restart (seed 17): that assumption broken, not a rule.
	ro := Options{NodeTimeout: 20 * time.Millisecond, MaxTTL: w.maxTTL(), spawn: func(f func()) { go f() }}
	for _, i := range g.prev {
		ro.Previous = append(ro.Previous, &redis.Options{Addr: nodeAddr(i), Dialer: w.dial(g.id, kind), PoolSize: 18,
			DialTimeout: 20 * time.Millisecond, ReadTimeout: 20 * time.Millisecond, WriteTimeout: 20 * time.Millisecond,
			DisableIdentity: true, MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	}
	if ctl.opts != nil {
		ctl.opts(&ro)
	}
	w.hist.Note(w.now(), "", "gateway %d: process %d starts, nodes %v, previous %v", g.id, g.gen, g.list, g.prev)
	w.bgStart()
	go func() {
		defer w.bgDone()
		s, err := New(opts, ro)
		if err != nil {
			panic(err)
		}
		w.mu.Lock()
		w.ready = append(w.ready, rlReady{g: g, s: s, fn: ready})
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}()
}

type rlQuiet struct{}

func (rlQuiet) Printf(context.Context, string, ...any) {}

type rlReady struct {
	g  *rlGateway
	s  *Store
	fn func(*Store)
}

func (w *rlWorld) bgStart() {
	w.mu.Lock()
	w.bg++
	w.mu.Unlock()
}

func (w *rlWorld) bgDone() {
	w.mu.Lock()
	w.bg--
	w.mu.Unlock()
}

func (w *rlWorld) closeStore(s *Store) {
	if w.closed[s] {
		return
	}
	w.closed[s] = true
	w.bgStart()
	go func() {
		defer w.bgDone()
		_ = s.Close()
	}()
}

func (w *rlWorld) start(op *rlOp) {
	w.opSeq++
	op.id = w.opSeq
	op.store = op.gw.store
	w.pending[op] = true
	go func() {
		op.ans, op.err = op.call(context.Background())
		w.mu.Lock()
		w.finished = append(w.finished, op)
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}()
}

// newRLWorld is a world with no nodes or gateways yet, running ctl's
// scripts.
func newRLWorld(seed uint64, net rlNet, ctl rlControl, hist *sim.History) *rlWorld {
	return &rlWorld{seed: seed, r: rand.New(rand.NewPCG(seed, 0x7ed1)), net: net, t0: time.Now(), hist: hist,
		scripts: rlScripts(ctl.scripts), batchAll: ctl.batchAll, conns: map[string]int{}, cutUntil: map[[2]int]int64{},
		closed: map[*Store]bool{}, wake: make(chan struct{}, 1), pending: map[*rlOp]bool{}}
}

// runSimRedlock runs one seed in a bubble of its own.
func runSimRedlock(t *testing.T, seed uint64, cfg rlConfig) sim.Run {
	redis.SetLogger(rlQuiet{}) // dials refused by crashed nodes are the point
	var run sim.Run
	synctest.Test(t, func(t *testing.T) {
		run = runSimRedlockIn(seed, cfg)
	})
	return run
}

func runSimRedlockIn(seed uint64, cfg rlConfig) sim.Run {
	ctl := rlControls[cfg.control]
	hist := sim.NewHistory()
	hist.OwnFences = !cfg.strictRetry
	w := newRLWorld(seed, cfg.net, ctl, hist)
	total := cfg.nodes
	shift := cfg.nodes / 2
	if cfg.altList || cfg.transition {
		total += shift
	}
	for i := range total {
		w.nodes = append(w.nodes, &rlNode{id: i, addr: nodeAddr(i), srv: luaredis.New(), runID: fmt.Sprintf("%040x", w.r.Uint64()),
			offset: w.r.Int64N(2*cfg.net.offsetMax+1) - cfg.net.offsetMax, rate: (w.r.Float64()*2 - 1) * cfg.net.RateMax, loaded: map[string]bool{}})
	}
	// A4: the nodes may not all lose their data. One node of both lists
	// never crashes.
	stable := shift
	main := make([]int, cfg.nodes)
	for i := range main {
		main[i] = i
	}
	for i := range cfg.gateways {
		g := &rlGateway{id: i, list: main, old: cfg.transition}
		w.gws = append(w.gws, g)
		w.newStore(g, ctl, nil)
	}
	for name, limit := range cfg.sems {
		hist.Key(name, true, limit)
	}
	for _, name := range cfg.locks {
		hist.Key(name, false, 1)
	}
	w.loop(func() bool { return w.takeReady() && allStarted(w.gws) })
	start := w.now()
	var clients []*rlClient
	for i := range cfg.clients {
		c := &rlClient{id: i, w: w, cfg: &cfg, holds: map[string]int64{}}
		c.newToken()
		clients = append(clients, c)
		w.after(w.r.Int64N(10_000), c.step)
	}
	alt := make([]int, cfg.nodes)
	for i := range alt {
		alt[i] = shift + i
	}
	if cfg.altList {
		// A rolling deploy: a gateway with another node list over shared
		// nodes comes up mid-run; clients use it like the others.
		w.after(w.r.Int64N(2_000_000), func() {
			g := &rlGateway{id: len(w.gws), list: alt, alt: true}
			w.gws = append(w.gws, g)
			w.newStore(g, ctl, nil)
		})
	}
	if cfg.transition {
		// A change of the node list with gateways running (rule T): a
		// transition gateway begins it; the old gateways stop once it is
		// ready (the operator's part); a gateway with the new list alone
		// comes up a little later, and counts once the transition
		// finished. Clients use every gateway that runs.
		w.after(w.r.Int64N(2_000_000), func() {
			g := &rlGateway{id: len(w.gws), list: alt, prev: main}
			w.gws = append(w.gws, g)
			w.newStore(g, ctl, func(*Store) {
				for _, o := range w.gws {
					if o.old && !o.retired {
						o.retired = true
						w.hist.Note(w.now(), "", "gateway %d: stopped (the transition began)", o.id)
						if o.store != nil {
							w.closeStore(o.store)
							o.store = nil
						}
					}
				}
				w.after(w.r.Int64N(3_000_000), func() {
					n := &rlGateway{id: len(w.gws), list: alt}
					w.gws = append(w.gws, n)
					w.newStore(n, ctl, nil)
				})
			})
		})
	}
	faults := func() {
		if w.chance(cfg.net.pCrash) {
			n := w.nodes[w.r.IntN(len(w.nodes))]
			if n.id != stable && w.now() >= n.downUntil {
				w.crash(n, 1000+w.r.Int64N(cfg.net.downMax))
			}
		}
		if w.chance(cfg.net.pGWRestart) {
			g := w.gws[w.r.IntN(len(w.gws))]
			if g.store != nil {
				old := g.store
				w.newStore(g, ctl, func(*Store) { w.after(500_000, func() { w.closeStore(old) }) })
			}
		}
	}
	w.onRequest = faults
	w.loop(func() bool {
		w.takeReady()
		if len(hist.Violations) > 0 && w.ops < cfg.ops {
			cfg.ops = w.ops // stop early: a finding
		}
		return w.ops >= cfg.ops && len(w.pending) == 0
	})
	// Liveness: once every fault has ended and the longest lease and any
	// quarantine have passed, a healthy majority grants: an acquire of each
	// key with a fresh token, through each gateway whose list the nodes
	// serve, is answered 201 (a permit, 201), and its release 204.
	w.net = rlNet{Net: sim.Net{Timeout: cfg.net.Timeout, DelayMin: cfg.net.DelayMin, DelayMax: cfg.net.DelayMax}}
	for _, g := range w.gws {
		g.slowUntil = 0
	}
	w.onRequest = nil
	// A node that crashed last is down up to downMax, then quarantined for
	// MaxTTL plus 1 %; 3.5 s covered it when MaxTTL was a second.
	w.runFor(max(3_500_000, cfg.net.downMax+2*w.maxTTL().Microseconds()))
	if len(hist.Violations) == 0 {
		w.checkLive(cfg)
	}
	w.closeAll()
	hist.Check()
	run := sim.Run{Seed: seed, Ops: w.ops, Calls: w.calls, Late: w.late, Virtual: w.now() - start, Answers: map[string]int{}}
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
	run.Answers[fmt.Sprintf("node crashes (N=%d)", cfg.nodes)] += w.crashes
	if cfg.transition {
		run.Answers["transition: nodes given the new list"] += w.finishes
	}
	if v := hist.First(); v != nil {
		run.Violation = v
		run.Trace = hist.TraceOf(v, 0, sim.TraceLen)
	}
	return run
}

func allStarted(gws []*rlGateway) bool {
	for _, g := range gws {
		if g.store == nil {
			return false
		}
	}
	return true
}

// closeAll closes every store, those still starting too, and runs the
// world until their goroutines are done.
func (w *rlWorld) closeAll() {
	w.closing = true
	for _, s := range w.stores {
		w.closeStore(s)
	}
	w.loop(func() bool {
		w.takeReady()
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.bg == 0
	})
}

// takeReady hands the stores that finished starting to their gateways.
func (w *rlWorld) takeReady() bool {
	w.mu.Lock()
	rs := w.ready
	w.ready = nil
	w.mu.Unlock()
	sort.Slice(rs, func(i, j int) bool { return rs[i].g.id < rs[j].g.id })
	for _, r := range rs {
		w.stores = append(w.stores, r.s)
		if w.closing || r.g.retired {
			w.closeStore(r.s)
			continue
		}
		r.g.store = r.s
		w.hist.Note(w.now(), "", "gateway %d: process %d ready", r.g.id, r.g.gen)
		if r.fn != nil {
			r.fn(r.s)
		}
	}
	return true
}

// maxTTL is the gateways' MaxTTL, the quarantine of a restarted node: the
// spread of the nodes' clocks plus the fence margin, and a second more
// (see newStore).
func (w *rlWorld) maxTTL() time.Duration {
	lo, hi := w.nodes[0].offset, w.nodes[0].offset
	for _, n := range w.nodes {
		lo, hi = min(lo, n.offset), max(hi, n.offset)
	}
	return time.Duration(hi-lo)*time.Microsecond + script.FenceMargin + time.Second
}

// checkLive is the liveness check, run in a quiet world.
func (w *rlWorld) checkLive(cfg rlConfig) {
	keys := append([]string(nil), cfg.locks...)
	for name := range cfg.sems {
		keys = append(keys, name)
	}
	sort.Strings(keys)
	for _, g := range w.gws {
		if g.store == nil || !w.serves(g) {
			continue
		}
		for _, key := range keys {
			k := w.hist.Keys[key]
			for _, kind := range []string{"acquire", "release"} {
				req := &sim.Request{Client: 99, Gw: g.id, Kind: kind, Key: key, Sem: k.Sem, Token: fmt.Sprintf("live.g%d.%s", g.id, key), TTL: 100 * time.Millisecond}
				w.hist.Sent(w.now(), req, k.Limit)
				answered := false
				w.start(&rlOp{req: req, gw: g, call: sim.CallFor(g.store, req, k.Limit), done: func(op *rlOp) {
					op.req.Answer = sim.AnswerOf(op.req.Kind, op.ans, op.err)
					if op.req.Answer == "201" {
						op.req.Fence = op.ans.Fence
						op.req.Expires = op.req.Sent + op.ans.Granted.Microseconds()
					}
					w.hist.Answered(w.now(), op.req)
					answered = true
				}})
				w.loop(func() bool { return answered })
				want := map[string]string{"acquire": "201", "release": "204"}[kind]
				if req.Answer != want {
					w.hist.Violate("liveness", w.now(), key, "#%d %s through gateway %d (nodes %v) answered %s in a quiet world, not %s",
						req.ID, kind, g.id, g.list, req.Answer, want)
					return
				}
			}
		}
	}
}

// serves: every node of g's list serves g's list (its marker).
func (w *rlWorld) serves(g *rlGateway) bool {
	want := make([]string, 0, len(g.list))
	for _, i := range g.list {
		want = append(want, nodeAddr(i)+"/0")
	}
	sort.Strings(want)
	list := strings.Join(want, ",")
	for _, i := range g.list {
		v, _ := w.nodes[i].srv.Do("GET", script.SetKey)
		if v != list {
			return false
		}
	}
	return true
}

type rlClient struct {
	id          int
	w           *rlWorld
	cfg         *rlConfig
	token       string
	ntok        int
	outstanding int
	last        *sim.Request
	holds       map[string]int64
}

func (c *rlClient) newToken() {
	c.ntok++
	c.token = fmt.Sprintf("c%d.t%d", c.id, c.ntok)
}

func (c *rlClient) pickKey() (string, bool, int) {
	n := len(c.cfg.locks) + len(c.cfg.sems)
	i := c.w.r.IntN(n)
	if i < len(c.cfg.locks) {
		return c.cfg.locks[i], false, 1
	}
	i -= len(c.cfg.locks)
	names := make([]string, 0, len(c.cfg.sems))
	for name := range c.cfg.sems {
		names = append(names, name)
	}
	sort.Strings(names)
	return names[i], true, c.cfg.sems[names[i]]
}

// step is the client's next move (lockstore/redis/sim_test.go's simClient.step, over a
// Redlock).
func (c *rlClient) step() {
	w := c.w
	if w.ops >= c.cfg.ops {
		return
	}
	if w.onRequest != nil {
		w.onRequest()
	}
	r := w.r
	now := w.now()
	key, sem, limit := c.pickKey()
	held := make([]string, 0, len(c.holds))
	for k := range c.holds {
		held = append(held, k)
	}
	sort.Strings(held)
	for _, k := range held {
		if c.holds[k] > now && r.Float64() < 0.7 {
			key = k
			sem, limit = w.hist.Keys[k].Sem, w.hist.Keys[k].Limit
			break
		}
	}
	kind := "acquire"
	ttl := time.Duration(20+r.IntN(400)) * time.Millisecond
	n := 1
	switch {
	case c.last != nil && c.last.Answer == "503" && r.Float64() < 0.6:
		key, sem, kind, ttl = c.last.Key, c.last.Sem, c.last.Kind, c.last.TTL
		limit = w.hist.Keys[key].Limit
	case c.holds[key] > now:
		switch x := r.Float64(); {
		case x < 0.35:
			kind, ttl = "extend", time.Duration(10+r.IntN(800))*time.Millisecond
		case x < 0.5:
		case x < 0.85:
			kind = "release"
		default:
			w.after(r.Int64N(300_000), c.step)
			return
		}
	case c.last != nil && c.last.Answer == "503" && r.Float64() < 0.5:
		key, sem, kind = c.last.Key, c.last.Sem, "release"
		limit = w.hist.Keys[key].Limit
	default:
		if r.Float64() < 0.3 {
			c.newToken()
		}
	}
	if kind != "release" && r.Float64() < 0.12 {
		n = 2
	}
	if kind == "release" {
		c.holds[key] = 0
	}
	var gws []*rlGateway
	for _, g := range w.gws {
		if g.store != nil {
			gws = append(gws, g)
		}
	}
	first := r.IntN(len(gws))
	for i := range n {
		gw := gws[(first+i)%len(gws)]
		req := &sim.Request{Client: c.id, Gw: gw.id, Kind: kind, Key: key, Sem: sem, Token: c.token, TTL: ttl, AtLeast: sim.HoldAtLeast(w.r, kind, sem, ttl), Batch: w.batchAll && kind == "extend" || sim.Batched(w.r, kind)}
		w.hist.Sent(now, req, limit)
		c.outstanding++
		w.start(&rlOp{req: req, gw: gw, call: sim.CallFor(gw.store, req, limit), done: c.answered})
	}
}

// record writes op's answer into its request: the answer, and for a
// grant its fence and when its holder was told it ends.
func (op *rlOp) record() {
	r := op.req
	r.Answer = sim.AnswerOf(r.Kind, op.ans, op.err)
	if r.Answer == "201" || r.Answer == "200" {
		r.Fence = op.ans.Fence
		r.Expires = r.Sent + op.ans.Granted.Microseconds()
	}
}

func (c *rlClient) answered(op *rlOp) {
	w, r := c.w, op.req
	now := w.now()
	op.record()
	if r.Answer == "201" || r.Answer == "200" {
		if c.holds[r.Key] < now {
			c.holds[r.Key] = 0
		}
		c.holds[r.Key] = max(c.holds[r.Key], r.Expires-sim.Grace)
	}
	w.hist.Answered(now, r)
	c.last = r
	c.outstanding--
	if c.outstanding == 0 {
		think := w.r.Int64N(30_000)
		if strings.HasPrefix(r.Answer, "409") {
			think = 20_000 + w.r.Int64N(200_000)
		}
		w.after(think, c.step)
	}
}

// rlSweep runs seeds from first until the budget (or duration) is spent or
// a seed fails (stopAt).
func rlSweep(t *testing.T, control string, first uint64, budget int, duration time.Duration, stopAt func(sim.Run) bool) ([]sim.Run, *sim.Run) {
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
		cfg := defaultRLConfig(seed)
		cfg.control = control
		if c := rlControls[control].crashes; c > 0 {
			cfg.net.pCrash *= c
		}
		run := runSimRedlock(t, seed, cfg)
		runs = append(runs, run)
		ops += run.Ops
		if run.Violation != nil && (stopAt == nil || stopAt(run)) {
			return runs, &runs[len(runs)-1]
		}
	}
	return runs, nil
}

// TestSimRedlock runs the Redlock simulator without controls: no seed may
// find a violation.
func TestSimRedlock(t *testing.T) {
	control := *sim.Control
	if _, ok := rlControls[control]; !ok {
		t.Fatalf("no Redlock control %q", control)
	}
	began, cpu := time.Now(), sim.CPU()
	var runs []sim.Run
	var failed *sim.Run
	switch {
	case *sim.Seed != 0:
		runs, failed = rlSweep(t, control, *sim.Seed, 1, 0, nil)
	case *sim.Ops > 0:
		runs, failed = rlSweep(t, control, *sim.First, *sim.Ops, *sim.Duration, nil)
	default:
		runs, failed = rlSweep(t, control, *sim.First, sim.RedlockBudget, *sim.Duration, nil)
	}
	sim.LogSweep(t, runs, began, cpu)
	if failed != nil {
		ctl := ""
		if control != "" {
			ctl = " -sim.control " + control
		}
		t.Fatalf("%s\nreplay: go test ./lockstore/redlock -run 'TestSimRedlock$' -sim.seed %d%s -v", failed.RedlockReport(), failed.Seed, ctl)
	}
}

// TestSimRedlockControls runs each Redlock control within the short budget
// and requires the simulator to find it, by the check it is for. rule-q is
// not among them: the short budget does not find it (it needs a gateway
// process started after a node's restart to grant on it while an older
// lease lives; run it with -sim.control rule-q and -sim.ops).
//
// A sweep stops at the first find, so the budget is paid in full only by a
// control not found. The Redlock model's replays are not exact (the store's
// own retry pauses and attempt ids are not seeded), and restart-guard was
// found after 689 to 14,330 requests in six runs on one tree, and not
// within 20,000 once in a make test on a clean clone: each control gets
// three times the short budget.
func TestSimRedlockControls(t *testing.T) {
	for _, name := range []string{"restart-guard", "nodeset", "grant-held", "transition-early", "no-linger", "linger-capped", "extend-other"} {
		ctl := rlControls[name]
		t.Run(name, func(t *testing.T) {
			began := time.Now()
			runs, found := rlSweep(t, name, 1, 3*sim.RedlockBudget, 0, func(r sim.Run) bool {
				return strings.Contains("|"+ctl.want+"|", "|"+r.Violation.Check+"|")
			})
			ops, _, _, _ := sim.Totals(runs)
			if found == nil {
				t.Fatalf("the simulator did not find Redlock control %s (check %s) in %d requests over %d seeds", name, ctl.want, ops, len(runs))
			}
			t.Logf("found after %d requests (%d seeds, %s): %s", ops, len(runs), time.Since(began).Round(time.Millisecond), found.RedlockReport())
		})
	}
}

// TestSimRedlockStrictFences checks fence promises to a token that holds
// the key stricter than docs/api.md makes on Redlock (every sequential
// retry and extend answer its fence; a 201 to it a higher one), which
// TestSimRedlock leaves out (sim.History.OwnFences). docs/api.md promises
// the fence to a retry that reaches a majority of the nodes that granted
// the lease; one that reaches fewer may be answered 201 with a higher
// fence, and a call whose earlier round confirmed the lease answers 201
// with its fence, and twins may be answered two fences (docs/safety.md,
// "Fences and retries"). The simulator
// finds those within a few seeds: the test names the finding and skips; it
// fails only if the strict promise held for the whole short budget (then
// turn the check on in TestSimRedlock).
func TestSimRedlockStrictFences(t *testing.T) {
	var found *sim.Run
	for seed := uint64(1); seed <= 10 && found == nil; seed++ {
		cfg := defaultRLConfig(seed)
		cfg.strictRetry = true
		if run := runSimRedlock(t, seed, cfg); run.Violation != nil {
			found = &run
		}
	}
	if found != nil {
		t.Skipf("outside docs/api.md's promise on Redlock, as expected (twins, a retry that reached fewer than a majority of its lease's nodes, or a call whose earlier round confirmed the lease): %s",
			found.RedlockReport())
	}
}
