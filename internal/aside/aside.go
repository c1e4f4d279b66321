// Package aside runs a call on another goroutine than its caller's, so
// that the deep frames it needs do not stay in the stack of a goroutine
// that parks for a long time afterwards.
//
// A goroutine keeps the largest stack it ever needed: a go-redis call (the
// script, its pipeline, the reply's parsing) takes a request's goroutine
// past 8 KiB, to 16 KiB, and the garbage collector shrinks a stack back
// only when less than a quarter of it is in use, which a request parked
// under net/http's and the middlewares' frames (about 4 KiB) never is. Run
// aside, those frames live on another goroutine, and the parked one stays
// at 8 KiB: 8 KiB less per waiting acquire (lockstore, issue 17) and per
// hold (handlers).
//
// That other goroutine is a worker kept from an earlier call, whose stack
// has grown already, when one is idle. A goroutine started for each call
// grew its stack at every call, copying it, from the few KiB a goroutine
// starts with to 16 KiB: 12% of the gateway's CPU went to runtime.newstack
// and copystack in a profile of the contended benchmark (32 clients
// waiting on one key through Redis). BenchmarkRunDeep, a call needing
// 13 KiB of stack, takes 0.8 µs aside on a worker against 2.9 µs on a
// goroutine of its own (and one allocation instead of three).
package aside

import (
	"sync"
	"sync/atomic"
	"time"
)

// Run runs f on another goroutine and returns what it returned. The caller
// waits for f whatever happens, so its outcome is never lost, and a panic
// in f is raised again in the caller, where the request's recoverer is.
// f runs on an idle worker when there is one, or else on a goroutine
// started for it at once: a call never waits for a busy worker. A worker
// has the profiler's labels (runtime/pprof) of the goroutine that started
// it, which may not be the caller's.
func Run[T any](f func() T) T {
	c := &call[T]{f: f}
	c.done.Add(1)
	select {
	case work <- c: // an idle worker was parked in its receive
	default:
		go worker(c)
	}
	c.done.Wait()
	if c.panicked {
		panic(c.p)
	}
	return c.v
}

// Go runs f on another goroutine, as Run does, without waiting for it: on
// an idle worker when there is one, or else on a goroutine started for it
// at once. It is for calls started side by side, such as a Redlock
// round's one call per node, which a fresh goroutine each made grow its
// stack every time. Unlike Run, a panic in f is not caught: as in a
// goroutine of its own, it ends the process.
func Go(f func()) {
	c := goCall(f)
	select {
	case work <- c:
	default:
		go worker(c)
	}
}

// goCall is one Go.
type goCall func()

func (f goCall) run() { f() }

// call is one Run: f, its outcome, and the caller's wait for it.
type call[T any] struct {
	f        func() T
	v        T
	panicked bool
	p        any
	done     sync.WaitGroup
}

// run runs f and hands its outcome, a panic's too, to the caller. The
// panic is recovered here, so the worker goes on unharmed.
func (c *call[T]) run() {
	c.panicked = true
	defer func() {
		if c.panicked {
			c.p = recover() // nil when f called runtime.Goexit, which ends the worker too
		}
		c.done.Done()
	}()
	c.v = c.f()
	c.panicked = false
}

// work is where idle workers wait for a call, or for nil, which ends one.
// It is unbuffered: a send that does not block succeeds only when a worker
// is parked in its receive, that is only when a worker is idle.
var work = make(chan interface{ run() })

// maxIdle bounds the workers kept idle: one that finds maxIdle others idle
// exits. It is not tied to GOMAXPROCS: a call aside mostly waits for
// Redis's answer, off any CPU, so how many run at once follows the clients
// and Redis's latency (up to 32 in the contended benchmark), and the idle
// workers only absorb the swings between calls starting and ending; a call
// that finds none pays a goroutine's start and its stack's growth, as
// before. An idle worker costs its stack, 16 KiB at most (the collector
// halves it at each cycle while it idles), so 32 of them half a MiB.
const maxIdle = 32

// idleTimeout is reap's period: workers that were not needed for that long
// exit, so that an idle gateway keeps none after two periods or so.
// Long against the gaps between a busy gateway's calls (microseconds to
// milliseconds), short against an idle gateway's quiet. A variable for the
// tests, which shorten it before any call.
var idleTimeout = 5 * time.Second

var (
	idle  atomic.Int32 // workers idle, or about to be, or just woken
	low   atomic.Int32 // the fewest workers idle since the last reap
	armed atomic.Bool  // a reap is due
)

// worker runs c, then the calls it receives while idle, and exits when
// maxIdle others are idle already or when reap ends it. It waits for a
// call without a timer of its own: a timer in that wait (a select on its
// channel, and its reset) cost 0.2 µs a call, BenchmarkRunShallow's hand-
// over taking 0.65 µs instead of 0.45. Idle workers wait in the channel's
// order, so under load they all take calls in turn and none would time
// out anyway; reap ends as many as were not needed instead.
func worker(c interface{ run() }) {
	c.run()
	for {
		if idle.Add(1) > maxIdle {
			idle.Add(-1)
			return
		}
		arm()
		c = <-work
		n := idle.Add(-1)
		if c == nil {
			return
		}
		for l := low.Load(); n < l; l = low.Load() { // low = min(low, n)
			if low.CompareAndSwap(l, n) {
				break
			}
		}
		c.run()
	}
}

// arm has reap run in idleTimeout, unless it is due already. A worker
// becoming idle arms it after counting itself idle, and reap disarms
// itself before it looks at that count, so no idle worker is left without
// a reap to come.
func arm() {
	if !armed.Load() && armed.CompareAndSwap(false, true) {
		time.AfterFunc(idleTimeout, reap)
	}
}

// reap ends as many idle workers as stayed idle all along since the last
// reap (the fewest idle in that time): the calls did not need them. Then
// it comes again while any worker is idle.
func reap() {
ending:
	for n := low.Load(); n > 0; n-- {
		select {
		case work <- nil:
		default: // none parked: the others are busy, or about to be idle
			break ending
		}
	}
	low.Store(idle.Load())
	armed.Store(false)
	if idle.Load() > 0 {
		arm()
	}
}
