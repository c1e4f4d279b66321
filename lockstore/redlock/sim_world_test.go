//go:build !race

// The simulator runs one goroutine at a time, so the race detector finds
// nothing in it, and slows its Lua interpreter several times over: make
// test runs it without -race (Makefile, test).

package redlock

import (
	"bytes"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing/synctest"
	"time"

	"github.com/lockgateway/lockgateway/internal/luaredis"
	"github.com/lockgateway/lockgateway/lockstore/internal/sim"
)

// The Redlock simulator's world (issue 26). Unlike the `redis` model
// (sim.World), which replaces the gateway's go-redis client, this one runs
// the whole real Redlock store: NewRedlock with real go-redis clients, its
// fan-out goroutines, batches, warm-ups, probers, the node-list marking
// passes, and the restart guard's INFO on every new connection. Only the
// network is simulated: each go-redis connection is an rlConn, an in-memory
// net.Conn whose RESP commands become messages the world delivers to a
// node (a luaredis server answering HELLO, INFO, PING, SCRIPT, EVAL/EVALSHA,
// GET, SET, …) and whose replies come back the same way.
//
// Time is virtual: everything runs inside a testing/synctest bubble, so
// time.Now, timers and context deadlines of the real code are the bubble's
// clock, which moves only when every goroutine is blocked. The world's loop
// is the bubble's main goroutine: it waits (synctest.Wait) until every
// other goroutine is blocked, takes the commands written meanwhile and the
// requests answered, in a fixed order (connection, then sequence), draws
// their fates from the seed, and sleeps until its next event or until
// something is written. What the real code does between two such points
// runs concurrently, but touches the world only through those queues.
//
// The network model is TCP's: one connection delivers in order (a slow
// message holds up those behind it); "loss" is a connection that goes
// silent (its later messages never arrive, the gateway times out and
// closes it: "or never" of A1); commands on a connection the gateway closed
// still land (late landings). A command is never run twice: Redis over TCP
// cannot do that, and A1 does not allow it (the `redis` model's
// duplication is a gateway-level twin here, which clients do).

// rlNet adds to sim.Net what only the Redlock model has.
type rlNet struct {
	sim.Net
	pCrash     float64 // per client request, a node crashes (loses its data)
	downMax    int64   // how long a crashed node stays down at most
	pGWRestart float64 // per client request, a gateway process is replaced
	offsetMax  int64   // node clock offsets: uniform in ±offsetMax
	// pCut: per command sent, the link between its gateway and its node
	// is cut for up to cutMax (a partition of that one link: the gateway
	// reaches the other nodes, other gateways reach this one). What is
	// sent either way meanwhile arrives once the link heals, as TCP
	// retransmits it, unless its connection is gone by then. So one
	// gateway misses the same node in every phase of a round and round
	// after round, where a slow message (PSlow) misses it once: a lease
	// on some nodes, its renewal or release through another gateway on
	// others. At three times this rate the rounds mostly failed (503).
	pCut   float64
	cutMax int64
}

var defaultRLNet = rlNet{
	Net: sim.Net{
		Timeout: 20_000, DelayMin: 50, DelayMax: 1_500,
		PSlow: 0.02, SlowMax: 400_000, PLoss: 0.004,
		PSlowGW: 0.002, SlowGWFor: 300_000,
		PPause: 0.001, PauseMax: 150_000,
		// A3: rates within 1% of each other. Gateways run at the true
		// rate, so nodes within ±0.45% keep every pair within 0.9%.
		RateMax: 0.0045,
	},
	pCrash: 0.0015, downMax: 400_000, pGWRestart: 0.001,
	offsetMax: 3_000_000,
	pCut:      0.003, cutMax: 400_000,
}

type rlWorld struct {
	seed  uint64
	r     *rand.Rand
	net   rlNet
	t0    time.Time // the bubble's start
	seq   uint64
	queue sim.Queue // events; at in µs since t0
	nodes []*rlNode
	gws   []*rlGateway
	hist  *sim.History
	// batchAll: every extend goes as a hold renewer's batch (a control's
	// rlControl.batchAll), not half of them.
	batchAll bool

	scripts map[string]sim.Script // by SHA-1 of what the gateway sends

	mu       sync.Mutex // guards what goroutines of the real code hand the world
	arrivals []*rlMsg
	finished []*rlOp
	conns    map[string]int // (gateway, process, node) → connections dialed
	ready    []rlReady      // gateway processes that finished starting
	bg       int            // goroutines the world started besides requests
	stores   []*Store       // every gateway process started
	closed   map[*Store]bool
	closing  bool // the run is over: close stores as they start
	wake     chan struct{}

	onRequest func() // faults drawn as a client sends a request

	ops, calls, late int
	pending          map[*rlOp]bool
	opSeq            int
	crashes          int
	finishes         int // nodes a transition gave the new list
	// begun is, by node of the previous list, when a transition first
	// made it stop serving that list (rule T).
	begun map[int]int64
	// cutUntil is, by link (gateway, node), when a cut of it ends (pCut).
	cutUntil map[[2]int]int64
}

type rlNode struct {
	id          int
	addr        string
	srv         *luaredis.Server
	runID       string
	epoch       int // the process: one more per restart
	offset      int64
	rate        float64
	pausedUntil int64
	downUntil   int64 // crashed: no process until then
	crashed     bool  // lost its data at least once (A4: not all of them)
	loaded      map[string]bool
	conns       []*rlConn
}

// rlMsg is one command as the gateway wrote it.
type rlMsg struct {
	c    *rlConn
	seq  int
	argv []string
}

// rlConn is the gateway's end of one connection to a node.
type rlConn struct {
	w      *rlWorld
	node   *rlNode
	gw     int
	name   string // "g1.c.n2#3": gateway, client (c, probe p), node, dial count
	epoch  int
	notify chan struct{}

	mu        sync.Mutex
	rbuf      []byte
	wbuf      []byte
	wseq      int
	closed    bool // by the gateway
	reset     bool // by the node (a crash)
	rdeadline time.Time

	// World-side (the world's goroutine only).
	silent    bool  // lost: nothing more arrives either way
	lastReqAt int64 // TCP order: deliveries of requests, then of replies
	lastRepAt int64
}

func (w *rlWorld) now() int64 { return time.Since(w.t0).Microseconds() }

func (w *rlWorld) at(t int64, fn func()) {
	w.seq++
	heap.Push(&w.queue, &sim.Event{At: t, Seq: w.seq, Fn: fn})
}

func (w *rlWorld) after(d int64, fn func()) { w.at(w.now()+d, fn) }

func (w *rlWorld) chance(p float64) bool { return w.r.Float64() < p }

// settle waits until the real code is blocked, then takes what it handed
// over, in an order that does not depend on the Go scheduler.
func (w *rlWorld) settle() {
	synctest.Wait()
	w.mu.Lock()
	arr, fin := w.arrivals, w.finished
	w.arrivals, w.finished = nil, nil
	w.mu.Unlock()
	sort.SliceStable(arr, func(i, j int) bool {
		if arr[i].c.name != arr[j].c.name {
			return arr[i].c.name < arr[j].c.name
		}
		return arr[i].seq < arr[j].seq
	})
	for _, m := range arr {
		w.send(m)
	}
	sort.Slice(fin, func(i, j int) bool { return fin[i].id < fin[j].id })
	for _, op := range fin {
		delete(w.pending, op)
		w.ops++
		op.done(op)
	}
}

// loop runs events until stop says so (checked between events).
func (w *rlWorld) loop(stop func() bool) {
	for {
		w.settle()
		if stop() {
			return
		}
		if len(w.queue) == 0 {
			select { // only the real code's own timers are left
			case <-w.wake:
			case <-time.After(time.Second):
			}
			continue
		}
		next := w.queue[0].At
		if d := next - w.now(); d > 0 {
			t := time.NewTimer(time.Duration(d) * time.Microsecond)
			select {
			case <-t.C:
			case <-w.wake:
				t.Stop()
				continue // something was written before next: take it first
			}
		}
		e := heap.Pop(&w.queue).(*sim.Event)
		e.Fn()
	}
}

// runFor runs the world for d µs of virtual time.
func (w *rlWorld) runFor(d int64) {
	end := w.now() + d
	w.at(end, func() {})
	w.loop(func() bool { return w.now() >= end })
}

// nodeClock is node n's clock at true time now, µs: an offset and a rate
// (A3), never a step.
func (w *rlWorld) nodeClock(n *rlNode, now int64) int64 {
	return w.t0.UnixMicro() + n.offset + int64(float64(now)*(1+n.rate))
}

func (w *rlWorld) delay(gw int) int64 {
	g := w.gws[gw]
	if w.now() < g.slowUntil && w.chance(0.5) || w.chance(w.net.PSlow) {
		return w.net.Timeout + w.r.Int64N(w.net.SlowMax-w.net.Timeout)
	}
	return w.net.DelayMin + w.r.Int64N(w.net.DelayMax-w.net.DelayMin)
}

// send puts a command on the wire to its node.
func (w *rlWorld) send(m *rlMsg) {
	c := m.c
	if c.silent {
		return
	}
	if w.chance(w.net.PSlowGW) {
		w.gws[c.gw].slowUntil = w.now() + w.r.Int64N(w.net.SlowGWFor)
	}
	if w.chance(w.net.PLoss) {
		c.silent = true
		return
	}
	link := [2]int{c.gw, c.node.id}
	if w.chance(w.net.pCut) {
		until := w.now() + w.r.Int64N(w.net.cutMax)
		if until > w.cutUntil[link] {
			w.cutUntil[link] = until
			w.hist.Note(w.now(), "", "link gateway %d - node %d cut until +%s", c.gw, c.node.id, sim.Dur(until-w.now()))
		}
	}
	at := max(max(w.now(), w.cutUntil[link])+w.delay(c.gw), c.lastReqAt)
	c.lastReqAt = at
	w.at(at, func() { w.deliver(m) })
	if w.chance(w.net.PPause) {
		n := c.node
		n.pausedUntil = max(n.pausedUntil, w.now()+w.r.Int64N(w.net.PauseMax))
		w.hist.Note(w.now(), "", "node %d paused until +%s", n.id, sim.Dur(n.pausedUntil-w.now()))
	}
}

// deliver runs a command on its node, which answers over the same
// connection.
func (w *rlWorld) deliver(m *rlMsg) {
	c, n := m.c, m.c.node
	if c.epoch != n.epoch || w.now() < n.downUntil {
		return // the process it was sent to is gone
	}
	if w.now() < n.pausedUntil {
		w.at(n.pausedUntil, func() { w.deliver(m) })
		return
	}
	n.srv.SetTime(w.nodeClock(n, w.now()))
	val, err, script := w.exec(n, m.argv)
	c.mu.Lock()
	late := c.closed
	c.mu.Unlock()
	if script != "" {
		w.calls++
		if late {
			w.late++
		}
		w.noteRan(n, c, script, m.argv, val, err, late)
		if script == "nodeset_mark.lua" {
			w.noteMark(n, m.argv, val)
		}
	}
	if c.silent || w.chance(w.net.PLoss) {
		c.silent = true
		return
	}
	var b bytes.Buffer
	respWrite(&b, val, err)
	at := max(max(w.now(), w.cutUntil[[2]int{c.gw, n.id}])+w.delay(c.gw), c.lastRepAt)
	c.lastRepAt = at
	w.at(at, func() {
		if c.epoch != n.epoch || c.silent {
			return
		}
		c.mu.Lock()
		c.rbuf = append(c.rbuf, b.Bytes()...)
		c.mu.Unlock()
		c.wakeUp()
	})
}

// exec runs one command on node n: what go-redis and the Redlock code ask.
func (w *rlWorld) exec(n *rlNode, argv []string) (val any, err error, script string) {
	name := strings.ToUpper(argv[0])
	switch {
	case name == "HELLO":
		return nil, luaredis.Error("ERR unknown command 'HELLO'"), "" // RESP2, as an old Redis
	case name == "INFO":
		return fmt.Sprintf("# Server\r\nredis_version:7.0.15\r\nrun_id:%s\r\n", n.runID), nil, ""
	case name == "PING":
		return "PONG", nil, ""
	case name == "SCRIPT" && len(argv) == 3 && strings.EqualFold(argv[1], "LOAD"):
		sha := luaredis.Sha1(argv[2])
		n.loaded[sha] = true
		return sha, nil, ""
	case name == "EVAL" || name == "EVALSHA":
		sha, src := argv[1], ""
		if name == "EVAL" {
			src = argv[1]
			sha = luaredis.Sha1(src)
			n.loaded[sha] = true
		} else if !n.loaded[sha] {
			return nil, luaredis.Error("NOSCRIPT No matching script. Please use EVAL."), ""
		}
		s, ok := w.scripts[sha]
		if !ok {
			if src == "" {
				panic(fmt.Sprintf("sim: the gateway called an unknown script %s", sha))
			}
			s = sim.Script{Name: "?", Src: src}
		}
		nk, _ := strconv.Atoi(argv[2])
		keys := argv[3 : 3+nk]
		args := make([]any, 0, len(argv)-3-nk)
		for _, a := range argv[3+nk:] {
			args = append(args, a)
		}
		val, err = n.srv.Eval(s.Src, keys, args...)
		return val, err, s.Name
	}
	args := make([]any, len(argv))
	for i, a := range argv {
		args[i] = a
	}
	val, err = n.srv.Do(args...)
	return val, err, ""
}

func (w *rlWorld) noteRan(n *rlNode, c *rlConn, script string, argv []string, val any, err error, late bool) {
	nk, _ := strconv.Atoi(argv[2])
	key := sim.KeyOf(argv[3 : 3+nk])
	if w.hist.Keys[key] == nil {
		return
	}
	tok := ""
	for _, a := range argv[3+nk:] {
		if len(a) == 64 {
			tok = " tok=" + w.hist.TokenOf(a)
			break
		}
	}
	when := ""
	if late {
		when = "  LATE: its gateway gave up"
	}
	w.hist.Note(w.now(), key, "  n%d runs %s from %s%s → %s%s", n.id, strings.TrimSuffix(script, ".lua"), c.name, tok, w.hist.Short(sim.Reply{Val: val, Err: err}), when)
}

// noteMark checks rule T's claim where it is decided: a finish (a node
// given the new list in place of the transition) happens only once every
// lease or permit an old gateway answered for has ended (docs/safety.md,
// "A transition", the claim), so a new gateway's grant cannot overlap
// one.
func (w *rlWorld) noteMark(n *rlNode, argv []string, val any) {
	nk, _ := strconv.Atoi(argv[2])
	args := argv[3+nk:]
	reply, _ := val.([]any)
	if len(args) < 6 || len(reply) == 0 {
		return
	}
	now := w.now()
	if args[1] == "begin" && args[5] == "1" && (reply[0] == args[4] || reply[0] == "") {
		// A node of the previous list stopped serving it (or was found
		// empty and marked so): the first time is when its settling began.
		if w.begun == nil {
			w.begun = map[int]int64{}
		}
		if _, ok := w.begun[n.id]; !ok {
			w.begun[n.id] = now
		}
		return
	}
	if args[1] != "finish" || reply[0] != args[4]+">"+args[0] {
		return
	}
	w.finishes++
	w.hist.Note(now, "", "  n%d: transition finished (the new list)", n.id)
	// The claim's premise: a majority of the previous list's nodes began
	// settling the longest lease (MaxTTL) ago at least.
	prev := strings.Count(args[4], ",") + 1
	settled := 0
	for _, at := range w.begun {
		if at <= now-w.maxTTL().Microseconds() {
			settled++
		}
	}
	if settled < prev/2+1 {
		w.hist.Violate("transition-settled", now, "", "n%d was given the new list when %d of the %d nodes of the previous list had begun settling %s ago or more: a majority must have",
			n.id, settled, prev, w.maxTTL())
		return
	}
	for _, r := range w.hist.Reqs {
		g := w.gws[r.Gw]
		if !g.old || (r.Answer != "201" && r.Answer != "200") || r.Expires <= now {
			continue
		}
		w.hist.Violate("transition-settled", now, r.Key, "n%d was given the new list while #%d (%s through old gateway %d, %s, fence %d) holds until %s: a new gateway could grant beside it",
			n.id, r.ID, r.Kind, g.id, r.Answer, r.Fence, sim.Dur(r.Expires))
		return
	}
}

// crash stops node n's process: its connections are reset, its data is
// lost, and it comes back after down µs with a new run_id.
func (w *rlWorld) crash(n *rlNode, down int64) {
	w.mu.Lock() // dial reads these
	defer w.mu.Unlock()
	w.crashes++
	n.epoch++
	n.crashed = true
	n.downUntil = w.now() + down
	for _, c := range n.conns {
		c.mu.Lock()
		c.reset = true
		c.mu.Unlock()
		c.wakeUp()
	}
	n.conns = nil
	n.srv.FlushAll()
	n.loaded = map[string]bool{}
	n.runID = fmt.Sprintf("%040x", w.r.Uint64())
	w.hist.Note(w.now(), "", "node %d crashed, data lost; back at +%s with a new run_id", n.id, sim.Dur(down))
}

// dial is the gateways' go-redis Dialer: an rlConn to the node at addr.
func (w *rlWorld) dial(gw int, kind string) func(context.Context, string, string) (net.Conn, error) {
	return func(_ context.Context, _, addr string) (net.Conn, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		var n *rlNode
		for _, x := range w.nodes {
			if x.addr == addr {
				n = x
			}
		}
		if n == nil || w.now() < n.downUntil {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused (simulated)")}
		}
		id := fmt.Sprintf("g%d.%s.n%d", gw, kind, n.id)
		w.conns[id]++
		c := &rlConn{w: w, node: n, gw: gw, name: fmt.Sprintf("%s#%04d", id, w.conns[id]), epoch: n.epoch, notify: make(chan struct{}, 1)}
		n.conns = append(n.conns, c)
		return c, nil
	}
}

func (c *rlConn) wakeUp() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

func (c *rlConn) Read(b []byte) (int, error) {
	for {
		c.mu.Lock()
		if len(c.rbuf) > 0 {
			n := copy(b, c.rbuf)
			c.rbuf = c.rbuf[n:]
			c.mu.Unlock()
			return n, nil
		}
		closed, reset, dl := c.closed, c.reset, c.rdeadline
		c.mu.Unlock()
		if closed {
			return 0, net.ErrClosed
		}
		if reset {
			return 0, io.EOF
		}
		var timeout <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			t := time.NewTimer(d)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-c.notify:
		case <-timeout:
			return 0, os.ErrDeadlineExceeded
		}
	}
}

func (c *rlConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	if c.reset {
		return 0, io.ErrClosedPipe
	}
	c.wbuf = append(c.wbuf, b...)
	var msgs []*rlMsg
	for {
		argv, rest, ok := respParse(c.wbuf)
		if !ok {
			break
		}
		c.wbuf = rest
		c.wseq++
		msgs = append(msgs, &rlMsg{c: c, seq: c.wseq, argv: argv})
	}
	if len(msgs) > 0 {
		c.w.mu.Lock()
		c.w.arrivals = append(c.w.arrivals, msgs...)
		c.w.mu.Unlock()
		select {
		case c.w.wake <- struct{}{}:
		default:
		}
	}
	return len(b), nil
}

func (c *rlConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.wakeUp()
	return nil
}

type rlAddr string

func (a rlAddr) Network() string { return "sim" }

func (a rlAddr) String() string { return string(a) }

func (c *rlConn) LocalAddr() net.Addr { return rlAddr(c.name) }

func (c *rlConn) RemoteAddr() net.Addr { return rlAddr(c.node.addr) }

func (c *rlConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdeadline = t
	c.mu.Unlock()
	c.wakeUp()
	return nil
}

func (c *rlConn) SetReadDeadline(t time.Time) error { return c.SetDeadline(t) }

func (c *rlConn) SetWriteDeadline(time.Time) error { return nil } // writes never block

// respParse takes one command (an array of bulk strings) off b.
func respParse(b []byte) (argv []string, rest []byte, ok bool) {
	line := func(b []byte) (string, []byte, bool) {
		i := bytes.Index(b, []byte("\r\n"))
		if i < 0 {
			return "", nil, false
		}
		return string(b[:i]), b[i+2:], true
	}
	h, b, ok := line(b)
	if !ok {
		return nil, nil, false
	}
	if len(h) == 0 || h[0] != '*' {
		panic("sim: a command that is not a RESP array: " + h)
	}
	n, _ := strconv.Atoi(h[1:])
	for range n {
		var l string
		if l, b, ok = line(b); !ok {
			return nil, nil, false
		}
		size, _ := strconv.Atoi(l[1:])
		if len(b) < size+2 {
			return nil, nil, false
		}
		argv = append(argv, string(b[:size]))
		b = b[size+2:]
	}
	return argv, b, true
}

// respWrite encodes a luaredis reply in RESP2.
func respWrite(b *bytes.Buffer, v any, err error) {
	if err != nil {
		fmt.Fprintf(b, "-%s\r\n", strings.ReplaceAll(err.Error(), "\r\n", " "))
		return
	}
	switch v := v.(type) {
	case nil:
		b.WriteString("$-1\r\n")
	case int64:
		fmt.Fprintf(b, ":%d\r\n", v)
	case string:
		fmt.Fprintf(b, "$%d\r\n%s\r\n", len(v), v)
	case []any:
		fmt.Fprintf(b, "*%d\r\n", len(v))
		for _, e := range v {
			if e, ok := e.(error); ok {
				respWrite(b, nil, e)
				continue
			}
			respWrite(b, e, nil)
		}
	default:
		panic(fmt.Sprintf("sim: a reply of type %T", v))
	}
}
