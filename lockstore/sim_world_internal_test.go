//go:build !race

// The simulator runs one goroutine at a time, so the race detector finds
// nothing in it, and slows its Lua interpreter several times over: make
// test runs it without -race (Makefile, test).

package lockstore

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgateway/lockgateway/internal/luaredis"
)

// The deterministic simulator's world (issue 26): one thread, a seeded
// PRNG, virtual time in µs, an event queue. Nodes are internal/luaredis
// servers running the real scripts (the differential test proves them equal
// to Redis). Gateways run the real Go code: each client request is a call
// of the store's own method (Redis.Acquire, Redis.Release, …) in a goroutine
// of its own, whose go-redis client is simRedis: every script call it makes
// parks the goroutine and becomes a message the world delivers, delays,
// loses, duplicates or reorders. Only one goroutine runs at a time (the
// world hands control to it and waits until it parks again or returns), so
// a seed replays exactly.
//
// A call the gateway gave up on (its backend timeout passed) is answered
// with a timeout error, which the Go code turns into ErrUnavailable (503,
// "outcome unknown"), and its message still lands later, when its delay
// says: the late writes of docs/safety.md.

// simNet is the network and fault model, in virtual µs.
type simNet struct {
	timeout   int64 // the gateway's backend timeout
	delayMin  int64 // a message's usual delay: uniform in [delayMin, delayMax]
	delayMax  int64
	pSlow     float64 // a message is slow (a retransmission): uniform in [timeout, slowMax]
	slowMax   int64
	pLoss     float64 // a message is lost (each way)
	pDup      float64 // a request is delivered twice
	pSlowGW   float64 // per gateway, how often a stretch of slowness starts (per request)
	slowGWFor int64   // how long such a stretch lasts at most
	pPause    float64 // per request, the node pauses
	pauseMax  int64
}

var defaultSimNet = simNet{
	timeout: 20_000, delayMin: 50, delayMax: 1_500,
	pSlow: 0.03, slowMax: 400_000, pLoss: 0.01, pDup: 0.005,
	pSlowGW: 0.002, slowGWFor: 300_000,
	pPause: 0.001, pauseMax: 150_000,
}

type simEvent struct {
	at  int64
	seq uint64
	fn  func()
}

type simQueue []*simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(*simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// simScript is a script as a node runs it: its name, its source, and how
// many arguments it reads (0: all; a control running an older script
// passes what the older Go code did).
type simScript struct {
	name  string
	src   string
	nargs int
}

type simWorld struct {
	seed    uint64
	r       *rand.Rand
	net     simNet
	now     int64
	seq     uint64
	queue   simQueue
	park    chan simPark
	running *simOp
	nodes   []*simNode
	gws     []*simGateway
	scripts map[string]simScript // by the SHA-1 the Go code names
	hist    *simHistory
	ops     int // requests answered
	calls   int // script calls delivered to a node
	late    int // script calls that ran after their gateway gave up
	pending map[*simOp]bool
}

type simNode struct {
	id          int
	srv         *luaredis.Server
	offset      int64 // the node's clock minus true time, µs
	pausedUntil int64
	loaded      map[string]bool // SCRIPT LOAD / EVAL seen since the last restart
}

type simGateway struct {
	id        int
	store     *Redis
	slowUntil int64 // a slow path to the node until then
}

// simOp is one client request running in a gateway.
type simOp struct {
	req  *simRequest
	gw   *simGateway
	call func(ctx context.Context) (simAnswer, error)
	ans  simAnswer
	err  error
	done func(*simOp)
}

// simAnswer is what a store method returned that the checkers need.
type simAnswer struct {
	fence   int64
	granted time.Duration
	renewed bool
}

type simCall struct {
	op       *simOp
	sha      string
	src      string // "" for EVALSHA
	keys     []string
	args     []any
	reply    chan simReply
	answered bool // the gateway has its answer (a reply, or its timeout)
	sentAt   int64
}

type simReply struct {
	val any
	err error
}

type simPark struct {
	call *simCall // nil: the op returned
}

var errSimTimeout = errors.New("i/o timeout (simulated: the gateway gave up on the call)")

func newSimWorld(seed uint64, nodes, gateways int, net simNet, scripts map[string]simScript, hist *simHistory) *simWorld {
	w := &simWorld{seed: seed, r: rand.New(rand.NewPCG(seed, 0x51a7)), net: net, park: make(chan simPark),
		scripts: scripts, hist: hist, pending: map[*simOp]bool{}}
	w.now = 1_800_000_000_000_000 + int64(seed%1000)*1_000_000_000
	for i := range nodes {
		n := &simNode{id: i, srv: luaredis.New(), offset: w.r.Int64N(2_000_000) - 1_000_000, loaded: map[string]bool{}}
		w.nodes = append(w.nodes, n)
	}
	for i := range gateways {
		g := &simGateway{id: i}
		g.store = &Redis{client: simRedis{w: w}, scripts: simRedis{w: w}, rooms: newRooms(), publish: publishAll, mode: RedisSingle,
			clocks: w.clocks()}
		w.gws = append(w.gws, g)
	}
	return w
}

// clocks is rule D's sampler for a simulated gateway (clock.go): on the
// world's clock, with the gateway's backend timeout. A call fails only by
// that timeout, which fires at its give-up moment, so settle never waits.
func (w *simWorld) clocks() *clocks {
	c := newClocks(time.Duration(w.net.timeout)*time.Microsecond, false)
	c.now = func() time.Time { return time.UnixMicro(w.now) }
	c.sleepUntil = func(t time.Time) {
		panic(fmt.Sprintf("sim: a call failed %s before its give-up moment", t.Sub(time.UnixMicro(w.now))))
	}
	return c
}

func (w *simWorld) at(t int64, fn func()) {
	w.seq++
	heap.Push(&w.queue, &simEvent{at: t, seq: w.seq, fn: fn})
}

func (w *simWorld) after(d int64, fn func()) { w.at(w.now+d, fn) }

// step runs the next event; false when none is left.
func (w *simWorld) step() bool {
	if len(w.queue) == 0 {
		return false
	}
	e := heap.Pop(&w.queue).(*simEvent)
	w.now = max(w.now, e.at)
	e.fn()
	return true
}

func (w *simWorld) chance(p float64) bool { return w.r.Float64() < p }

// start runs op in its gateway: a goroutine of its own, to which the world
// hands control until it parks on a script call or returns.
func (w *simWorld) start(op *simOp) {
	w.pending[op] = true
	w.running = op
	go func() {
		op.ans, op.err = op.call(context.Background())
		w.park <- simPark{}
	}()
	w.await(op)
}

func (w *simWorld) await(op *simOp) {
	p := <-w.park
	w.running = nil
	if p.call == nil {
		delete(w.pending, op)
		w.ops++
		op.done(op)
		return
	}
	w.send(p.call)
}

func (w *simWorld) resume(c *simCall, r simReply) {
	c.answered = true
	w.running = c.op
	c.reply <- r
	w.await(c.op)
}

// drain ends the ops still waiting on a call, as if their calls timed out,
// so no goroutine is left behind.
func (w *simWorld) drain() {
	for len(w.pending) > 0 {
		if !w.step() {
			break
		}
	}
}

func (w *simWorld) delay(g *simGateway) int64 {
	if w.now < g.slowUntil && w.chance(0.5) || w.chance(w.net.pSlow) {
		return w.net.timeout + w.r.Int64N(w.net.slowMax-w.net.timeout)
	}
	return w.net.delayMin + w.r.Int64N(w.net.delayMax-w.net.delayMin)
}

// send puts a gateway's script call on the wire to the node.
func (w *simWorld) send(c *simCall) {
	g := c.op.gw
	c.sentAt = w.now
	if w.chance(w.net.pSlowGW) {
		g.slowUntil = w.now + w.r.Int64N(w.net.slowGWFor)
	}
	w.after(w.net.timeout, func() {
		if !c.answered {
			w.resume(c, simReply{err: errSimTimeout})
		}
	})
	if !w.chance(w.net.pLoss) {
		w.after(w.delay(g), func() { w.deliver(c, w.nodes[0]) })
	}
	if w.chance(w.net.pDup) {
		w.after(w.delay(g)+w.delay(g), func() { w.deliver(c, w.nodes[0]) })
	}
	if w.chance(w.net.pPause) {
		n := w.nodes[0]
		n.pausedUntil = max(n.pausedUntil, w.now+w.r.Int64N(w.net.pauseMax))
		w.hist.note(w.now, "", "node %d paused until +%s", n.id, simDur(n.pausedUntil-w.now))
	}
}

// deliver runs a call on a node, which answers it (unless the answer is
// lost) over the same kind of link.
func (w *simWorld) deliver(c *simCall, n *simNode) {
	if w.now < n.pausedUntil { // a paused process reads its socket when it resumes
		w.at(n.pausedUntil, func() { w.deliver(c, n) })
		return
	}
	w.calls++
	s, ok := w.scripts[c.sha]
	if !ok {
		panic(fmt.Sprintf("sim: the gateway called an unknown script %s", c.sha))
	}
	n.srv.SetTime(w.now + n.offset)
	var r simReply
	if c.src == "" && !n.loaded[c.sha] {
		r.err = luaredis.Error("NOSCRIPT No matching script. Please use EVAL.")
	} else {
		n.loaded[c.sha] = true
		args := c.args
		if s.nargs > 0 && len(args) > s.nargs {
			args = args[:s.nargs]
		}
		r.val, r.err = n.srv.Eval(s.src, c.keys, args...)
		if r.err == nil && r.val == nil {
			r.err = redis.Nil
		}
	}
	late := c.answered
	if late {
		w.late++
	}
	w.hist.nodeRan(w.now, c, s.name, r, late)
	// Rule D: a grant that runs once its gateway may have answered 503
	// for it (its call's timeout) grants nothing (codes 1 and 2 of both
	// scripts: a new grant, a renewal).
	if (s.name == "acquire.lua" || s.name == "sem_acquire.lua") && w.now >= c.sentAt+w.net.timeout && simGranted(r) {
		w.hist.violate("late-grant", w.now, simKeyOf(c.keys), "%s of #%d ran %s after it was sent, past its gateway's give-up, and answered %s",
			s.name, c.op.req.id, simDur(w.now-c.sentAt), w.hist.short(r))
	}
	if w.chance(w.net.pLoss) {
		return
	}
	w.after(w.delay(c.op.gw), func() {
		if !c.answered {
			w.resume(c, r)
		}
	})
}

// simGranted says whether a grant script's reply is a grant or a renewal.
func simGranted(r simReply) bool {
	list, ok := r.val.([]any)
	if r.err != nil || !ok || len(list) == 0 {
		return false
	}
	code, _ := list[0].(int64)
	return code == 1 || code == 2
}

// simRedis is the gateways' go-redis client: it implements only what
// redis.Script.Run calls (EvalSha, then Eval on NOSCRIPT); any other method
// panics on the nil interface.
type simRedis struct {
	redis.UniversalClient
	w *simWorld
}

func (c simRedis) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return c.do(ctx, sha, "", keys, args)
}

func (c simRedis) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.do(ctx, luaredis.Sha1(script), script, keys, args)
}

func (c simRedis) do(ctx context.Context, sha, src string, keys []string, args []any) *redis.Cmd {
	op := c.w.running
	if op == nil {
		panic("sim: a script call outside a simulated request")
	}
	call := &simCall{op: op, sha: sha, src: src, keys: keys, args: args, reply: make(chan simReply)}
	c.w.park <- simPark{call: call}
	r := <-call.reply
	cmd := redis.NewCmd(ctx)
	if r.err != nil {
		cmd.SetErr(r.err)
	} else {
		cmd.SetVal(r.val)
	}
	return cmd
}

// simScripts are the scripts the `redis` gateway runs, by SHA-1, with the
// substitutions a control makes (by name: the source to run instead, and
// how many arguments it reads).
func simScripts(subst map[string]simScript) map[string]simScript {
	out := map[string]simScript{}
	for _, s := range []simScript{
		{name: "acquire.lua", src: deadlineLua + acquireLua},
		{name: "clock.lua", src: clockLua},
		{name: "extend.lua", src: extendLua},
		{name: "inspect.lua", src: inspectLua},
		{name: "release.lua", src: releaseLua},
		{name: "sem_acquire.lua", src: deadlineLua + semCommonLua + semAcquireLua},
		{name: "sem_extend.lua", src: semCommonLua + semExtendLua},
		{name: "sem_read.lua", src: semCommonLua + semReadLua},
		{name: "sem_release.lua", src: semCommonLua + semReleaseLua},
	} {
		sha := luaredis.Sha1(s.src)
		if r, ok := subst[s.name]; ok {
			s.src, s.nargs = r.src, r.nargs
			if strings.HasPrefix(s.name, "acquire") || strings.HasPrefix(s.name, "sem_acquire") {
				// A control's grant script still takes rule D's deadline
				// (deadline.lua), unless the control replaces that too.
				if !strings.HasPrefix(s.src, "-- deadline.lua") {
					s.src = deadlineLua + s.src
				}
			}
		}
		out[sha] = s
	}
	return out
}

// simKeyOf names the simulated key a script call is about, from its first
// Redis key ("lockgw:{k}:lock", "lockgw:{sem#k}:permits").
func simKeyOf(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	k := keys[0]
	if i, j := strings.IndexByte(k, '{'), strings.IndexByte(k, '}'); i >= 0 && j > i {
		return strings.TrimPrefix(k[i+1:j], semTag)
	}
	return k
}

func simDur(us int64) string {
	return time.Duration(us * 1000).String()
}
