package script

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Go never queues a call behind another: with every worker busy, the next
// call starts on a new one.
func TestGoNeverWaitsForAWorker(t *testing.T) {
	const blocked = 64
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(blocked)
	for range blocked {
		Go(func() {
			started.Done()
			<-release
		})
	}
	started.Wait() // hangs (the test times out) if a call waited for a worker
	ran := make(chan struct{})
	Go(func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("a call waited while every worker was busy")
	}
	close(release)
}

// A worker that finished a call runs the next one: its grown stack is what
// Go is for.
func TestGoReusesIdleWorkers(t *testing.T) {
	ids := map[string]bool{}
	for range 1000 {
		id := make(chan string)
		Go(func() { id <- goroutineID() })
		ids[<-id] = true
	}
	// One after another, 1000 calls ran on a worker or two (a few more
	// when a worker is slow to go idle on a busy machine); goroutines of
	// their own would have been 1000.
	require.Less(t, len(ids), 100)
}

// goroutineID is the number in the first line of the goroutine's stack.
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	return id
}
