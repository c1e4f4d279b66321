package lockstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/memory"
	"github.com/lockgateway/lockgateway/lockstore/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// counter is a key kind whose state is a number the test sets, with a
// signal, counting the hub's reads.
type counter struct {
	mu    sync.Mutex
	n     int
	reads atomic.Int64
	wakes map[chan struct{}]struct{}
}

func (c *counter) set(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n = n
	for w := range c.wakes {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

func (c *counter) kind() lockstore.Source[int] {
	c.wakes = make(map[chan struct{}]struct{})
	return lockstore.Source[int]{
		Inspect: func(context.Context, string) (int, error) {
			c.reads.Add(1)
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.n, nil
		},
		Same: func(a, b int) bool { return a == b },
		Signal: func(_ context.Context, _ string, wake chan struct{}) (func(), error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.wakes[wake] = struct{}{}
			return func() {
				c.mu.Lock()
				defer c.mu.Unlock()
				delete(c.wakes, wake)
			}, nil
		},
		Poll: time.Hour,
	}
}

// TestHubSlowWatcherSkipsInOrder: a watcher that does not read while the
// state changes 1 000 times holds one update, the newest; one that reads
// as they come sees states only ever increasing, ending with the last.
func TestHubSlowWatcherSkipsInOrder(t *testing.T) {
	c := &counter{}
	hub := lockstore.NewHub(c.kind())
	slow, fast := hub.Watch("k"), hub.Watch("k")
	defer slow.Close()
	defer fast.Close()
	<-slow.Ready()
	u, ok := slow.Latest()
	require.True(t, ok)
	require.Equal(t, 0, u.State)

	seen := make(chan []int)
	go func() {
		var states []int
		for range fast.Ready() {
			u, ok := fast.Latest()
			if !ok {
				continue
			}
			states = append(states, u.State)
			if u.State == 1000 {
				seen <- states
				return
			}
		}
	}()
	for i := 1; i <= 1000; i++ {
		c.set(i)
		if i%50 == 0 {
			time.Sleep(time.Millisecond) // let the hub read some in between
		}
	}
	var states []int
	select {
	case states = <-seen:
	case <-time.After(10 * time.Second):
		t.Fatal("the fast watcher never saw the last state")
	}
	for i := 1; i < len(states); i++ {
		require.Greater(t, states[i], states[i-1], "in order")
	}
	t.Logf("fast watcher saw %d of 1000 states, the hub read %d times", len(states), c.reads.Load())

	<-slow.Ready()
	u, ok = slow.Latest()
	require.True(t, ok)
	assert.Equal(t, 1000, u.State, "the slow watcher's one slot holds the newest state")
	_, ok = slow.Latest()
	assert.False(t, ok, "and nothing else")
}

// TestHubSharedAndStopped: 1 000 watchers of a key cost one read per
// change; the key's goroutine and its signal end with the last watcher.
func TestHubSharedAndStopped(t *testing.T) {
	c := &counter{}
	hub := lockstore.NewHub(c.kind())
	ws := make([]*lockstore.Watch[int], 1000)
	for i := range ws {
		ws[i] = hub.Watch("k")
	}
	for _, w := range ws {
		<-w.Ready()
		w.Latest()
	}
	before := c.reads.Load()
	c.set(7)
	for _, w := range ws {
		select {
		case <-w.Ready():
		case <-time.After(5 * time.Second):
			t.Fatal("a watcher was not told")
		}
		u, ok := w.Latest()
		require.True(t, ok)
		require.Equal(t, 7, u.State)
	}
	assert.Equal(t, int64(1), c.reads.Load()-before, "one read for 1 000 watchers")
	keys, watchers := hub.Watchers()
	assert.Equal(t, 1, keys)
	assert.Equal(t, 1000, watchers)

	for _, w := range ws {
		w.Close()
	}
	keys, watchers = hub.Watchers()
	assert.Zero(t, keys)
	assert.Zero(t, watchers)
	assert.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.wakes) == 0
	}, 2*time.Second, 10*time.Millisecond, "the signal was stopped")
}

// watchLock waits for the next update of a lock watch.
func watchLock(t *testing.T, w *lockstore.Watch[lockstore.LockState]) lockstore.Update[lockstore.LockState] {
	t.Helper()
	for {
		select {
		case <-w.Ready():
			if u, ok := w.Latest(); ok {
				require.NoError(t, u.Err)
				return u
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no update")
		}
	}
}

// testLockHub: on store, the hub reports a grant, an extend, a release and
// an expiry nobody announced, each within a short time of it.
func testLockHub(t *testing.T, store lockstore.Store) {
	ctx := context.Background()
	hub := lockstore.NewLockHub(store, time.Second)
	w := hub.Watch("k")
	defer w.Close()
	u := watchLock(t, w)
	require.False(t, u.State.Held)

	token := lockstore.NewToken()
	at := time.Now()
	l, err := store.Acquire(ctx, "k", lockstore.AcquireRequest{Token: token, TTL: time.Minute})
	require.NoError(t, err)
	u = watchLock(t, w)
	require.True(t, u.State.Held)
	assert.Equal(t, l.Fence, u.State.Lease.Fence)
	assert.Empty(t, u.State.Lease.Token, "never a token")
	assert.Less(t, time.Since(at), time.Second)

	at = time.Now()
	_, err = store.Extend(ctx, "k", token, 2*time.Minute)
	require.NoError(t, err)
	u = watchLock(t, w)
	require.True(t, u.State.Held)
	assert.Greater(t, time.Until(u.State.Lease.ExpiresAt), time.Minute)
	assert.Less(t, time.Since(at), time.Second)

	at = time.Now()
	_, err = store.Acquire(ctx, "k", lockstore.AcquireRequest{Token: token, TTL: 3 * time.Minute})
	require.NoError(t, err)
	u = watchLock(t, w)
	require.True(t, u.State.Held)
	assert.Greater(t, time.Until(u.State.Lease.ExpiresAt), 2*time.Minute, "a renewal by the holder's token")
	assert.Less(t, time.Since(at), time.Second)

	at = time.Now()
	require.NoError(t, store.Release(ctx, "k", token))
	u = watchLock(t, w)
	require.False(t, u.State.Held)
	assert.Less(t, time.Since(at), time.Second)

	l, err = store.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 300 * time.Millisecond})
	require.NoError(t, err)
	u = watchLock(t, w)
	require.True(t, u.State.Held)
	u = watchLock(t, w)
	require.False(t, u.State.Held, "expired")
	late := u.At.Sub(l.ExpiresAt)
	t.Logf("expiry seen %v after the lease's end", late)
	assert.Less(t, late, 500*time.Millisecond)
}

func TestLockHubMemory(t *testing.T) { testLockHub(t, memory.New()) }

func TestLockHubRedis(t *testing.T) { testLockHub(t, backendtest.NewRedis(t, redistest.Start(t))) }

func TestLockHubRedlock(t *testing.T) {
	testLockHub(t, backendtest.OpenRedlock(t, backendtest.URLs(backendtest.StartNodes(t, 3)), redlock.Options{NodeTimeout: 500 * time.Millisecond}))
}

// A Redlock lease's nodes let it go a few ms apart (the grant reached
// them at different moments), so a read just past the first node's expiry
// finds the lease on the others, ending later. That is no extend: nobody
// extended, and the hub must not report a change of expiry, only the
// expiry itself once a majority let go. Here the nodes' expiries are set
// 25 ms apart (100 ms from first to last), more than one read's round trip
// and Redlock's drift allowance (17 ms on a 1.5 s lease) together. They
// expire 2 s after being set, so that a loaded machine's hub still reads
// the lease held first; a grant answered unavailable is retried with its
// token, as a client would.
func TestLockHubRedlockNodesExpireApart(t *testing.T) {
	t.Parallel()
	srvs := backendtest.StartNodes(t, 5)
	store := backendtest.OpenRedlock(t, backendtest.URLs(srvs), redlock.Options{NodeTimeout: backendtest.Roomy})
	ctx := backendtest.Ctx(t)
	for round := range 3 {
		key := fmt.Sprintf("apart-%d", round)
		token := lockstore.NewToken()
		l, err := store.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: 1500 * time.Millisecond})
		for try := 0; try < 5 && errors.Is(err, lockstore.ErrUnavailable); try++ {
			l, err = store.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: 1500 * time.Millisecond})
		}
		require.NoError(t, err)
		for i, srv := range srvs {
			ms := 2000 + 25*i
			require.NoError(t, srv.Client().PExpire(ctx, "lockgw:{"+key+"}:lock", time.Duration(ms)*time.Millisecond).Err())
		}
		hub := lockstore.NewLockHub(store, time.Second)
		w := hub.Watch(key)
		u := watchLock(t, w)
		require.True(t, u.State.Held)
		require.Equal(t, l.Fence, u.State.Lease.Fence)
		// The next update is the expiry: no held state of the same grant
		// between (a watcher's "extended").
		u = watchLock(t, w)
		assert.False(t, u.State.Held, "round %d: a change of expiry nobody made: %+v", round, u.State)
		w.Close()
	}
}

// SameLock compares the windows two reads place a grant's expiry in
// ([ExpiresAt, ExpiresAt+Slack], give or take the 2 ms of whole
// milliseconds): overlapping windows may be one expiry, so no extend.
func TestSameLock(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	read := func(fence int64, expires, slack time.Duration) lockstore.LockState {
		return lockstore.LockState{Held: true, Lease: lockstore.Lease{Fence: fence, ExpiresAt: at.Add(expires)}, Slack: slack}
	}
	ms := time.Millisecond
	for _, c := range []struct {
		name string
		a, b lockstore.LockState
		same bool
	}{
		{"one read twice", read(1, 0, ms), read(1, 0, ms), true},
		{"both free", lockstore.LockState{}, lockstore.LockState{}, true},
		{"freed", read(1, 0, ms), lockstore.LockState{}, false},
		{"another grant", read(1, 0, ms), read(2, 0, ms), false},
		// A Redlock read past its first node's expiry: the others end
		// later, within the spread the first read saw.
		{"the nodes' spread", read(1, 0, 100*ms), read(1, 25*ms, 80*ms), true},
		{"past the first read's window", read(1, 0, 20*ms), read(1, 25*ms, ms), false},
		{"a shortening extend", read(1, 0, 20*ms), read(1, -25*ms, 20*ms), false},
		{"within the later read's window", read(1, 0, ms), read(1, -20*ms, 20*ms), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.same, lockstore.SameLock(c.a, c.b))
			assert.Equal(t, c.same, lockstore.SameLock(c.b, c.a), "symmetric")
		})
	}
}
