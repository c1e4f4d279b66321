package ratelimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/memory"
	"github.com/lockgateway/lockgateway/ratelimit"
)

// gated is a store whose calls for one key wait at a gate until the test
// opens it: a slow store, slow for as long as the test needs. Other keys
// pass straight through to memory.
type gated struct {
	mem   lockstore.Windows
	key   string
	open  chan error // each value lets one gated call go on, failing with it unless nil
	mu    sync.Mutex
	calls map[string]int
}

func newGated(user string) *gated {
	return &gated{mem: memory.New(), key: "ratelimit:" + user, open: make(chan error), calls: map[string]int{}}
}

func (g *gated) TakeWindow(ctx context.Context, key, id string, window time.Duration) (time.Duration, error) {
	g.mu.Lock()
	g.calls[key]++
	g.mu.Unlock()
	if key == g.key {
		select {
		case err := <-g.open:
			if err != nil {
				return 0, err
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return g.mem.TakeWindow(ctx, key, id, window)
}

func (g *gated) Calls(user string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls["ratelimit:"+user]
}

type result struct {
	d   ratelimit.Decision
	err error
}

// burst starts n concurrent Allow calls for user and returns once one is in
// the store and the other n-1 are waiting for it.
func burst(t *testing.T, l *ratelimit.Limiter, store *gated, user string, n int) <-chan result {
	t.Helper()
	out := make(chan result, n)
	for range n {
		go func() {
			d, err := l.Allow(context.Background(), user)
			out <- result{d, err}
		}()
	}
	// A liveness wait, not a timing claim: the generous bound only turns a
	// hang into a failure.
	require.Eventually(t, func() bool { return ratelimit.Followers(l, user) == n-1 && store.Calls(user) > 0 },
		30*time.Second, time.Millisecond)
	require.Equal(t, 1, store.Calls(user), "one store call, however many requests wait")
	return out
}

// TestBurstSharesOneCheck: a single user's concurrent burst makes one store
// call and is admitted once; the rest are refused until the window ends.
// Another user is not held up behind it.
func TestBurstSharesOneCheck(t *testing.T) {
	const n = 50
	store := newGated("alice")
	l, err := ratelimit.New(store, time.Minute, ratelimit.Options{Timeout: time.Minute})
	require.NoError(t, err)
	results := burst(t, l, store, "alice", n)

	// alice's check is stuck in the store; bob's goes through.
	d, err := l.Allow(context.Background(), "bob")
	require.NoError(t, err)
	assert.True(t, d.Allowed, "another user is not serialized behind alice")

	store.open <- nil
	admitted := 0
	for range n {
		r := <-results
		require.NoError(t, r.err)
		if r.d.Allowed {
			admitted++
			assert.False(t, r.d.Shared)
			continue
		}
		assert.True(t, r.d.Shared, "refused from the leader's check")
		assert.True(t, r.d.Cached, "no store round trip of its own")
		assert.NoError(t, r.d.LeaderErr)
		assert.Greater(t, r.d.Reset, 50*time.Second, "the rest of the leader's window")
		assert.LessOrEqual(t, r.d.Reset, time.Minute)
	}
	assert.Equal(t, 1, admitted)
	assert.Equal(t, 1, store.Calls("alice"))

	// After the burst, the cache answers as before.
	d, err = l.Allow(context.Background(), "alice")
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.True(t, d.Cached)
	assert.False(t, d.Shared)
	assert.Equal(t, 1, store.Calls("alice"))
}

// TestBurstRefusedLeaderRefusesAll: when the store refuses the leader
// (another replica took the window), its followers get the same Reset.
func TestBurstRefusedLeaderRefusesAll(t *testing.T) {
	const n = 20
	store := newGated("alice")
	_, err := store.mem.TakeWindow(context.Background(), "ratelimit:alice", "other-replica", time.Minute)
	require.NoError(t, err)
	l, err := ratelimit.New(store, time.Minute, ratelimit.Options{Timeout: time.Minute})
	require.NoError(t, err)
	results := burst(t, l, store, "alice", n)
	store.open <- nil
	for range n {
		r := <-results
		require.NoError(t, r.err)
		assert.False(t, r.d.Allowed)
		assert.Greater(t, r.d.Reset, 50*time.Second)
		assert.LessOrEqual(t, r.d.Reset, time.Minute)
	}
	assert.Equal(t, 1, store.Calls("alice"))
}

// TestBurstFailedLeader: the leader's store call fails. The leader gets the
// error; its followers are refused, carrying it as LeaderErr, so a caller
// that fails open admits one request and not the burst.
func TestBurstFailedLeader(t *testing.T) {
	const n = 20
	store := newGated("alice")
	l, err := ratelimit.New(store, time.Minute, ratelimit.Options{Timeout: time.Minute})
	require.NoError(t, err)
	results := burst(t, l, store, "alice", n)
	boom := errors.New("store down")
	store.open <- boom
	errs := 0
	for range n {
		r := <-results
		if r.err != nil {
			errs++
			assert.ErrorIs(t, r.err, boom)
			continue
		}
		assert.False(t, r.d.Allowed)
		assert.True(t, r.d.Shared)
		assert.ErrorIs(t, r.d.LeaderErr, boom)
		assert.Greater(t, r.d.Reset, 50*time.Second)
	}
	assert.Equal(t, 1, errs, "only the leader's own check failed")

	// Nothing was cached from the failure: the next request asks again.
	go func() { store.open <- nil }()
	d, err := l.Allow(context.Background(), "alice")
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, 2, store.Calls("alice"))
}

// TestBurstTimeoutFailOpenAdmitsOne is the bug at the middleware: the
// leader's check times out, the policy is fail open, and one user's burst is
// still admitted once.
func TestBurstTimeoutFailOpenAdmitsOne(t *testing.T) {
	const n = 30
	store := newGated("u")
	l, err := ratelimit.New(store, time.Minute, ratelimit.Options{Timeout: time.Minute})
	require.NoError(t, err)
	var warned apitest.SyncBuffer
	codes := burstThroughMiddleware(t, l, store, ratelimit.Config{Log: zerolog.New(&warned)}, n, context.DeadlineExceeded)
	assert.Equal(t, map[int]int{http.StatusNoContent: 1, http.StatusTooManyRequests: n - 1}, codes,
		"fail open admits the leader only")
	assert.Equal(t, 1, strings.Count(warned.String(), "rate limit store did not answer"), "one failure, one warning")
}

// TestBurstFailedLeaderPolicies: followers of a failed check are answered as
// the leader was when failing closed (503) and in shadow mode (admitted).
func TestBurstFailedLeaderPolicies(t *testing.T) {
	const n = 10
	for _, tc := range []struct {
		name string
		c    ratelimit.Config
		want int
	}{
		{"closed", ratelimit.Config{FailClosed: true}, http.StatusServiceUnavailable},
		{"shadow", ratelimit.Config{Shadow: true}, http.StatusNoContent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newGated("u")
			l, err := ratelimit.New(store, time.Minute, ratelimit.Options{Timeout: time.Minute})
			require.NoError(t, err)
			codes := burstThroughMiddleware(t, l, store, tc.c, n, errors.New("store down"))
			assert.Equal(t, map[int]int{tc.want: n}, codes)
		})
	}
}

// TestTimeoutBoundsCheck: detached from the request, the store call is
// still bounded by the limiter's timeout.
func TestTimeoutBoundsCheck(t *testing.T) {
	store := newGated("u") // never opened
	l, err := ratelimit.New(store, time.Minute, ratelimit.Options{Timeout: 20 * time.Millisecond})
	require.NoError(t, err)
	_, err = l.Allow(context.Background(), "u")
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// burstThroughMiddleware sends n concurrent requests of user "u" through
// l's middleware, fails the leader's store call with err once the other
// n-1 wait for it, and counts the status codes.
func burstThroughMiddleware(t *testing.T, l *ratelimit.Limiter, store *gated, c ratelimit.Config, n int, err error) map[int]int {
	t.Helper()
	c.Key = func(*http.Request) (string, bool) { return "u", true }
	mw, merr := ratelimit.Middleware(l, c)
	require.NoError(t, merr)
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("PUT", "/", nil))
			mu.Lock()
			codes[rec.Code]++
			mu.Unlock()
		})
	}
	require.Eventually(t, func() bool { return ratelimit.Followers(l, "u") == n-1 }, 30*time.Second, time.Millisecond)
	store.open <- err
	wg.Wait()
	return codes
}

// TestFollowerContextEnds: a follower whose own context ends returns at
// once with ctx.Err(), while the check goes on; the leader's context ending
// does not decide for the followers either.
func TestFollowerContextEnds(t *testing.T) {
	store := newGated("alice")
	l, err := ratelimit.New(store, time.Minute, ratelimit.Options{Timeout: time.Minute})
	require.NoError(t, err)

	leaderCtx, cancelLeader := context.WithCancel(context.Background())
	leader := make(chan result, 1)
	go func() {
		d, err := l.Allow(leaderCtx, "alice")
		leader <- result{d, err}
	}()
	require.Eventually(t, func() bool { return store.Calls("alice") == 1 }, 30*time.Second, time.Millisecond)

	followerCtx, cancelFollower := context.WithCancel(context.Background())
	follower := make(chan result, 1)
	go func() {
		d, err := l.Allow(followerCtx, "alice")
		follower <- result{d, err}
	}()
	patient := make(chan result, 1)
	go func() {
		d, err := l.Allow(context.Background(), "alice")
		patient <- result{d, err}
	}()
	require.Eventually(t, func() bool { return ratelimit.Followers(l, "alice") == 2 }, 30*time.Second, time.Millisecond)

	// The store is still stuck: nothing but the follower's own context can
	// release it.
	cancelFollower()
	r := <-follower
	require.ErrorIs(t, r.err, context.Canceled)

	cancelLeader()
	r = <-leader
	require.ErrorIs(t, r.err, context.Canceled)

	// The check was not cancelled with the leader: it goes on, the store
	// admits it (for the leader, who left), and the patient follower is
	// refused: the window is taken.
	store.open <- nil
	r = <-patient
	require.NoError(t, r.err)
	assert.False(t, r.d.Allowed)
	assert.True(t, r.d.Shared)
	assert.NoError(t, r.d.LeaderErr)
	assert.Equal(t, 1, store.Calls("alice"))
}

// TestMiddlewareAbandonedRequestNotAdmitted: failing open admits a request
// whose check failed, but not one whose client left during the check.
func TestMiddlewareAbandonedRequestNotAdmitted(t *testing.T) {
	store := newGated("u")
	l, err := ratelimit.New(store, time.Minute, ratelimit.Options{Timeout: time.Minute})
	require.NoError(t, err)
	mw, err := ratelimit.Middleware(l, ratelimit.Config{Key: func(*http.Request) (string, bool) { return "u", true }})
	require.NoError(t, err)
	reached := false
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached = true }))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("PUT", "/", nil).WithContext(ctx))
		done <- rec.Code
	}()
	require.Eventually(t, func() bool { return store.Calls("u") == 1 }, 30*time.Second, time.Millisecond)
	cancel()
	assert.Equal(t, http.StatusServiceUnavailable, <-done)
	assert.False(t, reached, "not admitted")
	store.open <- nil // let the check finish
}
