package aside

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests' idle workers go after two periods or so of 10 ms, not
// seconds. Set here, before any call, since workers read it.
func TestMain(m *testing.M) {
	idleTimeout = 10 * time.Millisecond
	m.Run()
}

// goid is the calling goroutine's id, which no other goroutine ever has.
func goid() int {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, err := strconv.Atoi(string(bytes.Fields(buf)[1])) // "goroutine 7 [running]:"
	if err != nil {
		panic(err)
	}
	return id
}

// Calls one after the other run on the same few workers, never on the
// caller's goroutine, even after panics: a goroutine started per call
// would show 100 ids.
func TestRunReusesWorkers(t *testing.T) {
	caller := goid()
	ids := map[int]bool{}
	for i := range 100 {
		var id int
		func() {
			defer func() { _ = recover() }()
			Run(func() int {
				id = goid()
				if i%2 == 0 {
					panic("boom")
				}
				return 0
			})
		}()
		assert.NotEqual(t, caller, id, "f ran on the caller's goroutine")
		ids[id] = true
	}
	assert.Less(t, len(ids), 10, "workers: %v", ids)
}

// A burst of calls all at once, twice as many as the idle workers kept:
// none waits for another (each one's f waits for all the others to have
// started), at most maxIdle workers stay afterwards, and they go when no
// call needs them any more.
func TestIdleWorkersAreBoundedAndGo(t *testing.T) {
	before := quiet(t)
	const n = 2 * maxIdle
	var started, finished sync.WaitGroup
	started.Add(n)
	release := make(chan struct{})
	for range n {
		finished.Go(func() {
			Run(func() int {
				started.Done()
				<-release
				return 0
			})
		})
	}
	allStarted := make(chan struct{})
	go func() { started.Wait(); close(allStarted) }()
	select {
	case <-allStarted: // n calls in f at once, on n goroutines aside
	case <-time.After(5 * time.Second):
		t.Fatal("a call waited for another")
	}
	close(release)
	finished.Wait()
	assert.LessOrEqual(t, idle.Load(), int32(maxIdle))
	assert.True(t, eventually(func() bool { return runtime.NumGoroutine() <= before+maxIdle }),
		"the workers beyond maxIdle did not go: %d goroutines, %d before", runtime.NumGoroutine(), before)
	quiet(t)
	assert.True(t, eventually(func() bool { return runtime.NumGoroutine() <= before }),
		"goroutines left: %d, %d before", runtime.NumGoroutine(), before)
}

// quiet waits until no worker is left and no reap due, and returns how
// many goroutines are then.
func quiet(t *testing.T) int {
	t.Helper()
	require.True(t, eventually(func() bool { return idle.Load() == 0 && !armed.Load() }),
		"%d workers still idle", idle.Load())
	time.Sleep(10 * time.Millisecond) // the last reap's goroutine returning
	return runtime.NumGoroutine()
}

// eventually reports whether cond became true within 5 seconds. Not
// testify's Eventually, whose own goroutines would be counted.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// Go, one call after the other, runs them on the same few workers, never
// on the caller's goroutine: a goroutine started per call would show 100
// ids.
func TestGoReusesWorkers(t *testing.T) {
	quiet(t)
	caller := goid()
	ids := map[int]bool{}
	for range 100 {
		id := make(chan int)
		Go(func() { id <- goid() })
		got := <-id
		assert.NotEqual(t, caller, got, "f ran on the caller's goroutine")
		ids[got] = true
	}
	assert.Less(t, len(ids), 10, "workers: %v", ids)
}

// Go never waits: with every worker busy, and more calls than idle workers
// are ever kept, each call still starts at once (each f waits for all the
// others to have started).
func TestGoNeverWaitsForAWorker(t *testing.T) {
	t.Cleanup(func() { quiet(t) }) // the burst's idle workers would serve the next test's calls in turn
	const n = 2 * maxIdle
	var started sync.WaitGroup
	started.Add(n)
	done := make(chan struct{})
	for range n {
		Go(func() {
			started.Done()
			started.Wait()
			done <- struct{}{}
		})
	}
	for range n {
		select {
		case <-done:
		case <-time.After(5 * time.Second): // a hang, not a duration under test
			t.Fatal("a call waited for another to finish")
		}
	}
}
