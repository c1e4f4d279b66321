package sim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/lockgateway/lockgateway/internal/luaredis"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/redis/go-redis/v9"
)

// Net is the network and fault model, in virtual µs.
type Net struct {
	Timeout   int64 // the gateway's backend timeout
	DelayMin  int64 // a message's usual delay: uniform in [DelayMin, DelayMax]
	DelayMax  int64
	PSlow     float64 // a message is slow (a retransmission): uniform in [Timeout, SlowMax]
	SlowMax   int64
	PLoss     float64 // a message is lost (each way)
	pDup      float64 // a request is delivered twice
	PSlowGW   float64 // per gateway, how often a stretch of slowness starts (per request)
	SlowGWFor int64   // how long such a stretch lasts at most
	PPause    float64 // per request, the node pauses
	PauseMax  int64
	// RateMax bounds the nodes' clock rates: each node's clock runs at a
	// rate uniform in 1 ± RateMax of true time, as gateways' do exactly. A3
	// allows 1% between any two hosts (docs/safety.md).
	RateMax float64
}

// DefaultNet is the `redis` model's network.
var DefaultNet = Net{
	Timeout: 20_000, DelayMin: 50, DelayMax: 1_500,
	PSlow: 0.03, SlowMax: 400_000, PLoss: 0.01, pDup: 0.005,
	PSlowGW: 0.002, SlowGWFor: 300_000,
	PPause: 0.001, PauseMax: 150_000,
	// One node: A3 allows it 1% from each gateway; rule E's allowance
	// (1% + 2 ms) is what a holder is told it may not rely on.
	RateMax: 0.0099,
}

// Event is something that happens at a virtual time. Events run in the
// order of At (µs), then of Seq (the order they were scheduled in), so
// that a seed replays.
type Event struct {
	At  int64
	Seq uint64
	Fn  func()
}

// Queue is a world's events, a container/heap by time.
type Queue []*Event

func (q Queue) Len() int { return len(q) }

func (q Queue) Less(i, j int) bool {
	if q[i].At != q[j].At {
		return q[i].At < q[j].At
	}
	return q[i].Seq < q[j].Seq
}

func (q Queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }

func (q *Queue) Push(x any) { *q = append(*q, x.(*Event)) }

func (q *Queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// Script is a script as a node runs it: its name, its source, and how
// many arguments it reads (0: all; a control running an older script
// passes what the older Go code did).
type Script struct {
	Name  string
	Src   string
	Nargs int
}

// World is the `redis` model's world (issue 26): one thread, a seeded
// PRNG, virtual time in µs (Now), an event queue. Nodes are
// internal/luaredis servers running the real scripts. Gateways run the
// real Go code: each client request is an Op, a call of the store's own
// method (Store.Acquire, Store.Release, …) in a goroutine of its own, whose
// go-redis client is a redisClient: every script call it makes parks the
// goroutine and becomes a message the world delivers, delays, loses,
// duplicates or reorders. Only one goroutine runs at a time (the world
// hands control to it and waits until it parks again or returns), so a
// seed replays exactly.
//
// A call the gateway gave up on (its backend timeout passed) is answered
// with a timeout error, which the Go code turns into ErrUnavailable (503,
// "outcome unknown"), and its message still lands later, when its delay
// says: the late writes of docs/safety.md.
type World struct {
	seed     uint64
	R        *rand.Rand
	net      Net
	Now      int64
	start    int64 // Now when the world began
	seq      uint64
	queue    Queue
	park     chan parked
	running  *Op
	nodes    []*node
	Gateways []*Gateway
	scripts  map[string]Script // by the SHA-1 the Go code names
	Hist     *History
	Ops      int // requests answered
	Calls    int // script calls delivered to a node
	Late     int // script calls that ran after their gateway gave up
	pending  map[*Op]bool
}

type node struct {
	id          int
	srv         *luaredis.Server
	offset      int64   // the node's clock minus true time at the world's start, µs
	rate        float64 // the node's clock runs at 1+rate of true time (A3)
	pausedUntil int64
	loaded      map[string]bool // SCRIPT LOAD / EVAL seen since the last restart
}

// Gateway is one gateway process: its store over the world's client.
type Gateway struct {
	ID        int
	Store     Store
	slowUntil int64 // a slow path to the node until then
}

// Op is one client request running in a gateway: Call, then Done with
// its Result and Err.
type Op struct {
	Req    *Request
	Gw     *Gateway
	Call   func(ctx context.Context) (Result, error)
	Result Result
	Err    error
	Done   func(*Op)
}

// Result is what a store method returned that the checkers need.
type Result struct {
	Fence   int64
	Granted time.Duration
	// ExpiresAt is the expires_at the client was told (rule E), on the
	// gateway's clock: the world's on the redis model, the bubble's on
	// Redlock.
	ExpiresAt time.Time
	renewed   bool
}

// scriptCall is one script call a gateway made, as a message.
type scriptCall struct {
	op       *Op
	sha      string
	src      string // "" for EVALSHA
	keys     []string
	args     []any
	reply    chan Reply
	answered bool // the gateway has its answer (a reply, or its timeout)
	sentAt   int64
}

// Reply is a node's answer to a script call.
type Reply struct {
	Val any
	Err error
}

// parked is what a request's goroutine hands the world as it stops.
type parked struct {
	call *scriptCall // nil: the op returned
}

var errTimeout = errors.New("i/o timeout (simulated: the gateway gave up on the call)")

// NewWorld makes a world of nodes and gateways; newStore makes a
// gateway's store over its simulated client and rule D's clock sampler.
func NewWorld(seed uint64, nodes, gateways int, net Net, scripts map[string]Script, hist *History,
	newStore func(client redis.UniversalClient, clocks *script.Clocks) Store) *World {
	w := &World{seed: seed, R: rand.New(rand.NewPCG(seed, 0x51a7)), net: net, park: make(chan parked),
		scripts: scripts, Hist: hist, pending: map[*Op]bool{}}
	w.Now = startOf(seed)
	w.start = w.Now
	for i := range nodes {
		n := &node{id: i, srv: luaredis.New(), offset: w.R.Int64N(2_000_000) - 1_000_000,
			rate: (w.R.Float64()*2 - 1) * net.RateMax, loaded: map[string]bool{}}
		w.nodes = append(w.nodes, n)
	}
	for i := range gateways {
		g := &Gateway{ID: i}
		g.Store = newStore(redisClient{w: w}, w.clocks())
		w.Gateways = append(w.Gateways, g)
	}
	return w
}

// clocks is rule D's sampler for a simulated gateway (script/clock.go): on the
// world's clock, with the gateway's backend timeout. A call fails only by
// that timeout, which fires at its give-up moment, so settle never waits.
func (w *World) clocks() *script.Clocks {
	c := script.NewClocks(time.Duration(w.net.Timeout)*time.Microsecond, false)
	c.Now = func() time.Time { return time.UnixMicro(w.Now) }
	c.SleepUntil = func(t time.Time) {
		panic(fmt.Sprintf("sim: a call failed %s before its give-up moment", t.Sub(time.UnixMicro(w.Now))))
	}
	return c
}

func (w *World) at(t int64, fn func()) {
	w.seq++
	heap.Push(&w.queue, &Event{At: t, Seq: w.seq, Fn: fn})
}

// After runs fn d µs from now.
func (w *World) After(d int64, fn func()) { w.at(w.Now+d, fn) }

// Step runs the next event; false when none is left.
func (w *World) Step() bool {
	if len(w.queue) == 0 {
		return false
	}
	e := heap.Pop(&w.queue).(*Event)
	w.Now = max(w.Now, e.At)
	e.Fn()
	return true
}

func (w *World) chance(p float64) bool { return w.R.Float64() < p }

// Start runs op in its gateway: a goroutine of its own, to which the world
// hands control until it parks on a script call or returns.
func (w *World) Start(op *Op) {
	w.pending[op] = true
	w.running = op
	go func() {
		op.Result, op.Err = op.Call(context.Background())
		w.park <- parked{}
	}()
	w.await(op)
}

func (w *World) await(op *Op) {
	p := <-w.park
	w.running = nil
	if p.call == nil {
		delete(w.pending, op)
		w.Ops++
		op.Done(op)
		return
	}
	w.send(p.call)
}

func (w *World) resume(c *scriptCall, r Reply) {
	c.answered = true
	w.running = c.op
	c.reply <- r
	w.await(c.op)
}

// Drain ends the ops still waiting on a call, as if their calls timed out,
// so no goroutine is left behind.
func (w *World) Drain() {
	for len(w.pending) > 0 {
		if !w.Step() {
			break
		}
	}
}

func (w *World) delay(g *Gateway) int64 {
	if w.Now < g.slowUntil && w.chance(0.5) || w.chance(w.net.PSlow) {
		return w.net.Timeout + w.R.Int64N(w.net.SlowMax-w.net.Timeout)
	}
	return w.net.DelayMin + w.R.Int64N(w.net.DelayMax-w.net.DelayMin)
}

// send puts a gateway's script call on the wire to the node.
func (w *World) send(c *scriptCall) {
	g := c.op.Gw
	c.sentAt = w.Now
	if w.chance(w.net.PSlowGW) {
		g.slowUntil = w.Now + w.R.Int64N(w.net.SlowGWFor)
	}
	w.After(w.net.Timeout, func() {
		if !c.answered {
			w.resume(c, Reply{Err: errTimeout})
		}
	})
	if !w.chance(w.net.PLoss) {
		w.After(w.delay(g), func() { w.deliver(c, w.nodes[0]) })
	}
	if w.chance(w.net.pDup) {
		w.After(w.delay(g)+w.delay(g), func() { w.deliver(c, w.nodes[0]) })
	}
	if w.chance(w.net.PPause) {
		n := w.nodes[0]
		n.pausedUntil = max(n.pausedUntil, w.Now+w.R.Int64N(w.net.PauseMax))
		w.Hist.Note(w.Now, "", "node %d paused until +%s", n.id, Dur(n.pausedUntil-w.Now))
	}
}

// nodeClock is node n's clock now, µs: its offset, and its rate since the
// world began.
func (w *World) nodeClock(n *node) int64 {
	return w.start + n.offset + int64(float64(w.Now-w.start)*(1+n.rate))
}

// deliver runs a call on a node, which answers it (unless the answer is
// lost) over the same kind of link.
func (w *World) deliver(c *scriptCall, n *node) {
	if w.Now < n.pausedUntil { // a paused process reads its socket when it resumes
		w.at(n.pausedUntil, func() { w.deliver(c, n) })
		return
	}
	w.Calls++
	s, ok := w.scripts[c.sha]
	if !ok {
		panic(fmt.Sprintf("sim: the gateway called an unknown script %s", c.sha))
	}
	n.srv.SetTime(w.nodeClock(n))
	var r Reply
	if c.src == "" && !n.loaded[c.sha] {
		r.Err = luaredis.Error("NOSCRIPT No matching script. Please use EVAL.")
	} else {
		n.loaded[c.sha] = true
		args := c.args
		if s.Nargs > 0 && len(args) > s.Nargs {
			args = args[:s.Nargs]
		}
		r.Val, r.Err = n.srv.Eval(s.Src, c.keys, args...)
		if r.Err == nil && r.Val == nil {
			r.Err = redis.Nil
		}
	}
	late := c.answered
	if late {
		w.Late++
	}
	w.Hist.nodeRan(w.Now, c, s.Name, r, late)
	// Rule D: a grant that runs once its gateway may have answered 503
	// for it (its call's timeout) grants nothing (codes 1 and 2 of both
	// scripts: a new grant, a renewal).
	if (s.Name == "acquire.lua" || s.Name == "sem_acquire.lua") && w.Now >= c.sentAt+w.net.Timeout && granted(r) {
		w.Hist.Violate("late-grant", w.Now, KeyOf(c.keys), "%s of #%d ran %s after it was sent, past its gateway's give-up, and answered %s",
			s.Name, c.op.Req.ID, Dur(w.Now-c.sentAt), w.Hist.Short(r))
	}
	if w.chance(w.net.PLoss) {
		return
	}
	w.After(w.delay(c.op.Gw), func() {
		if !c.answered {
			w.resume(c, r)
		}
	})
}

// granted says whether a grant script's reply is a grant or a renewal.
func granted(r Reply) bool {
	list, ok := r.Val.([]any)
	if r.Err != nil || !ok || len(list) == 0 {
		return false
	}
	code, _ := list[0].(int64)
	return code == 1 || code == 2
}

// redisClient is the gateways' go-redis client: it implements only what
// redis.Script.Run calls (EvalSha, then Eval on NOSCRIPT); any other method
// panics on the nil interface.
type redisClient struct {
	redis.UniversalClient
	w *World
}

func (c redisClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return c.do(ctx, sha, "", keys, args)
}

func (c redisClient) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.do(ctx, luaredis.Sha1(script), script, keys, args)
}

func (c redisClient) do(ctx context.Context, sha, src string, keys []string, args []any) *redis.Cmd {
	op := c.w.running
	if op == nil {
		panic("sim: a script call outside a simulated request")
	}
	call := &scriptCall{op: op, sha: sha, src: src, keys: keys, args: args, reply: make(chan Reply)}
	c.w.park <- parked{call: call}
	r := <-call.reply
	cmd := redis.NewCmd(ctx)
	if r.Err != nil {
		cmd.SetErr(r.Err)
	} else {
		cmd.SetVal(r.Val)
	}
	return cmd
}

// Pipeline is the hold renewer's batch (ExtendBatch, SemExtendBatch): its
// script calls go out when Exec runs, in order, each a call of its own, so
// each may be late, lost or answered on its own. That covers what one
// pipeline on a connection can meet, and more.
func (c redisClient) Pipeline() redis.Pipeliner { return &redisPipe{c: c} }

type redisPipe struct {
	redis.Pipeliner // only EvalSha and Exec are used
	c               redisClient
	calls           []func() error
}

func (p *redisPipe) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	p.calls = append(p.calls, func() error {
		r := p.c.do(ctx, sha, "", keys, args)
		cmd.SetVal(r.Val())
		cmd.SetErr(r.Err())
		return r.Err()
	})
	return cmd
}

func (p *redisPipe) Exec(context.Context) ([]redis.Cmder, error) {
	var first error
	for _, call := range p.calls {
		if err := call(); err != nil && first == nil {
			first = err
		}
	}
	return nil, first
}

// RedisScripts are the scripts the `redis` gateway runs, by SHA-1, with the
// substitutions a control makes (by name: the source to run instead, and
// how many arguments it reads).
func RedisScripts(subst map[string]Script) map[string]Script {
	out := map[string]Script{}
	for _, name := range []string{"acquire.lua", "clock.lua", "extend.lua", "inspect.lua", "release.lua",
		"sem_acquire.lua", "sem_extend.lua", "sem_read.lua", "sem_release.lua"} {
		s := Script{Name: name, Src: script.Sources[name]}
		sha := luaredis.Sha1(s.Src)
		if r, ok := subst[s.Name]; ok {
			s.Src, s.Nargs = r.Src, r.Nargs
			// A control's grant or delete still takes rule D's deadline
			// (deadline.lua), unless the control replaces that too, or
			// says with Nargs that it reads none.
			if script.Deadlined(name) && s.Nargs == 0 && !strings.HasPrefix(s.Src, "-- deadline.lua") {
				s.Src = script.DeadlineLua + s.Src
			}
		}
		out[sha] = s
	}
	return out
}

// KeyOf names the simulated key a script call is about, from its first
// Redis key ("lockgw:{k}:lock", "lockgw:{sem#k}:permits").
func KeyOf(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	k := keys[0]
	if i, j := strings.IndexByte(k, '{'), strings.IndexByte(k, '}'); i >= 0 && j > i {
		return strings.TrimPrefix(k[i+1:j], script.SemTag)
	}
	return k
}

// Dur writes us µs as a time.Duration does.
func Dur(us int64) string {
	return time.Duration(us * 1000).String()
}
