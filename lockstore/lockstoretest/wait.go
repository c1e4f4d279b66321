package lockstoretest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/lockstore"
)

// RunWait runs the waiting part of the suite. fair says the store grants
// waiters in arrival order (Memory, Redis); Redlock waits without a queue.
func RunWait(t *testing.T, newStore func(t *testing.T) lockstore.Store, fair bool) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s lockstore.Store, key string)
	}{
		{"GrantedOnRelease", testWaitRelease},
		{"GrantedOnExpiry", testWaitExpiry},
		{"TimesOut", testWaitTimeout},
		{"CancelledWaiterLeavesNoTrace", testWaitCancelled},
	}
	if fair {
		tests = append(tests, struct {
			name string
			fn   func(t *testing.T, s lockstore.Store, key string)
		}{"FIFO", testWaitFIFO})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t), key(t))
		})
	}
}

func waitFor(t *testing.T, s lockstore.Store, key string, wait time.Duration) (lockstore.Lease, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait+5*time.Second)
	defer cancel()
	return s.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 10 * time.Second, Wait: wait})
}

func testWaitRelease(t *testing.T, s lockstore.Store, key string) {
	holder := acquire(t, s, key, 10*time.Second)
	var released time.Time
	done := make(chan error, 1)
	go func() {
		time.Sleep(200 * time.Millisecond)
		released = time.Now()
		done <- s.Release(ctx(t), key, holder.Token)
	}()
	l, err := waitFor(t, s, key, 5*time.Second)
	granted := time.Now()
	// The waiter may be granted before the release's own answer is back:
	// wait for it, so the release is judged before the test ends.
	require.NoError(t, <-done)
	require.NoError(t, err)
	assert.Greater(t, l.Fence, holder.Fence)
	t.Logf("handoff: granted %v after the release", granted.Sub(released))
}

func testWaitExpiry(t *testing.T, s lockstore.Store, key string) {
	holder := acquire(t, s, key, 300*time.Millisecond) // a holder that dies
	start := time.Now()
	_, err := waitFor(t, s, key, 5*time.Second)
	require.NoError(t, err)
	granted := time.Now()
	// Not before the lease ran out: its end is at least holder.ExpiresAt
	// (the acquire's start plus the TTL, less the drift allowance under
	// Redlock), however long the acquire took.
	assert.False(t, granted.Before(holder.ExpiresAt), "granted %v before the lease ran out", holder.ExpiresAt.Sub(granted))
	t.Logf("took over an expired lease %v after it ran out (%v after the wait began)", granted.Sub(holder.ExpiresAt), granted.Sub(start))
}

func testWaitTimeout(t *testing.T, s lockstore.Store, key string) {
	holder := acquire(t, s, key, 10*time.Second)
	start := time.Now()
	_, err := waitFor(t, s, key, 300*time.Millisecond)
	end := time.Now()
	took := end.Sub(start)
	held, ok := err.(*lockstore.HeldError)
	require.True(t, ok, "a wait that runs out is a HeldError, got %v", err)
	// Remaining is the holder's time left as last seen, so no less than
	// what its lease had left when the wait ended (holder.ExpiresAt is a
	// lower bound of the lease's end; a store reads whole milliseconds),
	// and no more than its TTL: not the waiter's, not zero.
	assert.GreaterOrEqual(t, held.Remaining, holder.ExpiresAt.Sub(end)-time.Millisecond)
	assert.LessOrEqual(t, held.Remaining, 10*time.Second)
	assert.GreaterOrEqual(t, took, 300*time.Millisecond)
	t.Logf("a 300ms wait ended after %v", took)
}

// A waiter whose caller went away must not hold up the line: once the
// holder releases, a caller who does not wait at all gets the lock.
func testWaitCancelled(t *testing.T, s lockstore.Store, key string) {
	holder := acquire(t, s, key, 10*time.Second)
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.Acquire(c, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second, Wait: 10 * time.Second})
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)

	require.NoError(t, s.Release(ctx(t), key, holder.Token))
	_, err := s.Acquire(ctx(t), key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
	require.NoError(t, err, "no queue entry left behind")
}

// testWaitFIFO queues 10 waiters one after the other, then frees the lock:
// they must be granted in the order they came.
func testWaitFIFO(t *testing.T, s lockstore.Store, key string) {
	const n = 10
	holder := acquire(t, s, key, 30*time.Second)

	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			l, err := waitFor(t, s, key, 20*time.Second)
			if !assert.NoError(t, err, "waiter %d", i) {
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond) // hold it briefly
			assert.NoError(t, s.Release(ctx(t), key, l.Token))
		})
		// Let waiter i queue before waiter i+1 arrives: wait until the
		// queue holds it, not a fixed 50 ms, which a loaded machine
		// outlasted (waiter 1 queued before waiter 0).
		waitQueued(t, s, key, i+1)
	}
	require.NoError(t, s.Release(ctx(t), key, holder.Token))
	wg.Wait()
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, order)
}

// waitQueued waits until n callers wait in key's queue, as the store's
// listing counts them (every store with a queue lists).
func waitQueued(t *testing.T, s lockstore.Store, key string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, it := range listAll(t, s, key, 10) {
			if it.Key == key {
				return it.Waiters == n
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "waiter %d did not queue for %s", n-1, key)
}
