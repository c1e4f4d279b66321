package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/client"
	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/tools/chaos"
)

// paths records the escaped path of every request a client sends.
type paths struct {
	mu   sync.Mutex
	seen []string
}

func (p *paths) editor(_ context.Context, req *http.Request) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, req.Method+" "+req.URL.EscapedPath())
	return nil
}

func (p *paths) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

func newClient(t testing.TB, url string, opts ...client.ClientOption) *client.Client {
	t.Helper()
	c, err := client.New(url, opts...)
	require.NoError(t, err)
	return c
}

func memoryGateway(t testing.TB) *apitest.Gateway {
	return apitest.Start(t, map[string]string{"LOCKGW_BACKEND": "memory"})
}

func redisGateway(t testing.TB) (*apitest.Gateway, *redistest.Server) {
	srv := redistest.Start(t)
	return apitest.Start(t, map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_URL": srv.URL()}), srv
}

// TestOperations runs every operation against real gateways, with keys that
// hold "/", ":" and "@", and checks with a raw request that the gateway saw
// the key the client meant.
func TestOperations(t *testing.T) {
	backends := map[string]func(t *testing.T) *apitest.Gateway{
		"memory": func(t *testing.T) *apitest.Gateway { return memoryGateway(t) },
		"redis":  func(t *testing.T) *apitest.Gateway { g, _ := redisGateway(t); return g },
	}
	for name, start := range backends {
		t.Run(name, func(t *testing.T) {
			g := start(t)
			var rec paths
			c := newClient(t, g.URL, client.WithRequestEditorFn(rec.editor))
			raw := apitest.NewClient(g.URL)
			ctx := t.Context()

			// A minute: the lease must outlive every step below, and on a
			// loaded machine a step has taken five seconds.
			const ttl = time.Minute
			for _, key := range []string{"plain", "jobs/nightly", "a/b/c.d", "sku:4711@warehouse-eu"} {
				t.Run(key, func(t *testing.T) {
					lease, err := c.Acquire(ctx, key, client.AcquireOptions{TTL: ttl, Owner: "worker-7"})
					require.NoError(t, err)
					assert.Equal(t, key, lease.Key)
					assert.Equal(t, "worker-7", lease.Owner)
					assert.Equal(t, ttl, lease.TTL)
					assert.Positive(t, lease.Fence)
					assert.GreaterOrEqual(t, len(lease.Token), 22)
					assert.WithinDuration(t, time.Now().Add(ttl), lease.ExpiresAt, time.Second)

					// The gateway holds the key itself, not "jobs%2Fnightly".
					r := raw.Do(t, "GET", "/locks/"+key, nil)
					require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
					assert.Equal(t, key, r.JSON(t)["key"])

					// Same token again: 200, same fence.
					again, err := c.Acquire(ctx, key, client.AcquireOptions{TTL: ttl, Token: lease.Token})
					require.NoError(t, err)
					assert.Equal(t, lease.Fence, again.Fence)

					// Someone else: ErrHeld, with the holder's remaining TTL.
					_, err = c.Acquire(ctx, key, client.AcquireOptions{})
					require.ErrorIs(t, err, client.ErrHeld)
					var e *client.Error
					require.ErrorAs(t, err, &e)
					assert.Equal(t, http.StatusConflict, e.Status)
					assert.Equal(t, "lock-held", e.Type)
					assert.NotEmpty(t, e.RequestID)
					assert.GreaterOrEqual(t, e.RetryAfter, time.Second)
					// A same-token renewal in the grant's millisecond moves the
					// expiry 1 ms on (acquire.lua, reset_ttl: what tells it from
					// the grant), so a minute can be 60.001 s, and its ceiling 61 s.
					assert.LessOrEqual(t, e.RetryAfter, ttl+time.Second)

					info, err := c.Inspect(ctx, key)
					require.NoError(t, err)
					assert.Equal(t, key, info.Key)
					assert.Equal(t, "worker-7", info.Owner)
					assert.Equal(t, lease.Fence, info.Fence)
					assert.Positive(t, info.TTL)
					assert.LessOrEqual(t, info.TTL, ttl+time.Millisecond)

					ext, err := c.Extend(ctx, key, lease.Token, 2*ttl)
					require.NoError(t, err)
					assert.Equal(t, lease.Fence, ext.Fence)
					assert.Equal(t, 2*ttl, ext.TTL)
					assert.Equal(t, lease.Token, ext.Token)

					other := "someone-elses-token-0000000"
					_, err = c.Extend(ctx, key, other, 0)
					require.ErrorIs(t, err, client.ErrTokenMismatch)
					require.ErrorIs(t, c.Release(ctx, key, other), client.ErrTokenMismatch)

					require.NoError(t, c.Release(ctx, key, lease.Token))
					require.ErrorIs(t, c.Release(ctx, key, lease.Token), client.ErrNotHeld)
					_, err = c.Extend(ctx, key, lease.Token, 0)
					require.ErrorIs(t, err, client.ErrNotHeld)
					_, err = c.Inspect(ctx, key)
					require.ErrorIs(t, err, client.ErrNotHeld)
					assert.NotErrorIs(t, err, client.ErrHeld)

					// A new holder gets a higher fence.
					next, err := c.Acquire(ctx, key, client.AcquireOptions{TTL: time.Second})
					require.NoError(t, err)
					assert.Greater(t, next.Fence, lease.Fence)
					require.NoError(t, c.Release(ctx, key, next.Token))
				})
			}
			// The generated client percent-encodes "/" in the key.
			assert.Contains(t, rec.all(), "PUT /locks/jobs%2Fnightly")
			assert.Contains(t, rec.all(), "DELETE /locks/a%2Fb%2Fc.d")
		})
	}
}

func TestBadRequests(t *testing.T) {
	g := memoryGateway(t)
	c := newClient(t, g.URL)
	ctx := t.Context()

	_, err := c.Acquire(ctx, "k", client.AcquireOptions{TTL: 5 * time.Millisecond})
	var e *client.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, http.StatusUnprocessableEntity, e.Status)
	assert.Equal(t, "validation", e.Type)
	require.NotEmpty(t, e.Fields)
	assert.Equal(t, "ttl_ms", e.Fields[0].Field)
	assert.Contains(t, err.Error(), "ttl_ms")

	for _, key := range []string{"a//b", "/lead", "trail/", "a/../b", "sp ace", "br{ace}"} {
		_, err = c.Acquire(ctx, key, client.AcquireOptions{})
		require.ErrorAs(t, err, &e, "key %q", key)
		assert.Equal(t, http.StatusBadRequest, e.Status, "key %q", key)
		assert.Equal(t, "malformed-request", e.Type, "key %q", key)
	}

	_, err = client.New("localhost:8080")
	require.Error(t, err)
}

func TestUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now

	c := newClient(t, "http://"+addr)
	_, err = c.Acquire(t.Context(), "k", client.AcquireOptions{})
	require.ErrorIs(t, err, client.ErrUnavailable)
	require.ErrorIs(t, c.Release(t.Context(), "k", "some-token-0000000000000"), client.ErrUnavailable)

	// A waiting acquire retries until its wait is over, then gives up.
	start := time.Now()
	_, err = c.Acquire(t.Context(), "k", client.AcquireOptions{Wait: 300 * time.Millisecond})
	require.ErrorIs(t, err, client.ErrUnavailable)
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)

	// The caller's own cancellation is not "unavailable".
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = c.Inspect(ctx, "k")
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, client.ErrUnavailable)
}

func TestWait(t *testing.T) {
	g := memoryGateway(t)
	c := newClient(t, g.URL)
	ctx := t.Context()
	key := apitest.Key(t)

	first, err := c.Acquire(ctx, key, client.AcquireOptions{TTL: 10 * time.Second})
	require.NoError(t, err)

	// A wait that runs out: ErrHeld after the wait.
	start := time.Now()
	_, err = c.Acquire(ctx, key, client.AcquireOptions{Wait: 300 * time.Millisecond})
	require.ErrorIs(t, err, client.ErrHeld)
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)

	// A waiter gets the lock when the holder releases it.
	time.AfterFunc(200*time.Millisecond, func() { _ = c.Release(context.Background(), key, first.Token) })
	second, err := c.Acquire(ctx, key, client.AcquireOptions{Wait: 5 * time.Second})
	require.NoError(t, err)
	assert.Greater(t, second.Fence, first.Fence)
	t.Logf("waited %v for a release after 200ms", time.Since(start))
}

// TestWaitLongerThanTheGatewayAllows: a wait longer than LOCKGW_MAX_WAIT is
// made of several waiting requests.
func TestWaitLongerThanTheGatewayAllows(t *testing.T) {
	g := apitest.Start(t, map[string]string{"LOCKGW_BACKEND": "memory", "LOCKGW_MAX_WAIT": "500ms"})
	c := newClient(t, g.URL)
	ctx := t.Context()
	key := apitest.Key(t)

	first, err := c.Acquire(ctx, key, client.AcquireOptions{TTL: 10 * time.Second})
	require.NoError(t, err)
	time.AfterFunc(1200*time.Millisecond, func() { _ = c.Release(context.Background(), key, first.Token) })
	start := time.Now()
	second, err := c.Acquire(ctx, key, client.AcquireOptions{Wait: 5 * time.Second})
	require.NoError(t, err)
	assert.Greater(t, second.Fence, first.Fence)
	assert.GreaterOrEqual(t, time.Since(start), time.Second)
}

// TestHoldKeepsTheLease: work that runs for three TTLs keeps the lock, with
// the same fence, and the lock is free when Hold returns.
func TestHoldKeepsTheLease(t *testing.T) {
	g := memoryGateway(t)
	c := newClient(t, g.URL)
	key := apitest.Key(t)
	const ttl = 300 * time.Millisecond

	var fence int64
	err := c.Hold(t.Context(), key, client.AcquireOptions{TTL: ttl, Owner: "holder"}, func(ctx context.Context, lease *client.Lease) error {
		fence = lease.Fence
		end := time.Now().Add(3 * ttl)
		for time.Now().Before(end) {
			info, err := c.Inspect(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, lease.Fence, info.Fence)
			assert.Equal(t, "holder", info.Owner)
			require.NoError(t, ctx.Err())
			time.Sleep(ttl / 5)
		}
		return nil
	})
	require.NoError(t, err)
	assert.Positive(t, fence)
	_, err = c.Inspect(t.Context(), key)
	require.ErrorIs(t, err, client.ErrNotHeld, "released when fn returned")
}

// TestHoldCancelsWhenTheLockIsTakenAway deletes the lock from Redis behind
// the gateway's back: its next renewal (or its watch of the key) finds the
// lock gone, the hold's stream says so, and fn's context ends, well within
// the TTL.
func TestHoldCancelsWhenTheLockIsTakenAway(t *testing.T) {
	g, srv := redisGateway(t)
	c := newClient(t, g.URL)
	key := apitest.Key(t)
	const ttl = 3 * time.Second

	var took time.Duration
	err := c.Hold(t.Context(), key, client.AcquireOptions{TTL: ttl}, func(ctx context.Context, lease *client.Lease) error {
		n, err := srv.Client().Del(ctx, "lockgw:{"+key+"}:lock").Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "the lock's Redis key")
		deleted := time.Now()
		select {
		case <-ctx.Done():
			took = time.Since(deleted)
		case <-time.After(2 * ttl):
			t.Error("fn's context was not cancelled")
		}
		require.ErrorIs(t, context.Cause(ctx), client.ErrLockLost)
		require.ErrorIs(t, context.Cause(ctx), client.ErrNotHeld)
		return ctx.Err()
	})
	require.ErrorIs(t, err, client.ErrLockLost)
	require.ErrorIs(t, err, client.ErrNotHeld)
	t.Logf("fn's context ended %v after the lock was deleted (TTL %v, renewals every %v)", took, ttl, ttl/3)
	assert.Less(t, took, ttl/2, "cancelled at the next renewal")
}

// TestHoldCancelsWhenAnotherHolderTakesOver: the lock is deleted and taken
// by someone else; the hold's stream says lost (taken).
func TestHoldCancelsWhenAnotherHolderTakesOver(t *testing.T) {
	g, srv := redisGateway(t)
	c := newClient(t, g.URL)
	key := apitest.Key(t)

	err := c.Hold(t.Context(), key, client.AcquireOptions{TTL: time.Second}, func(ctx context.Context, lease *client.Lease) error {
		// The gateway learns of the hold's key through its watch of it,
		// which this Watch shares: once it has shown the lock held, the
		// gateway's next look is at the thief's grant. Deleted before that
		// first look, the key would be seen free, which the gateway takes
		// for a release with the token (released, not lost).
		changes, err := c.Watch(ctx, key)
		require.NoError(t, err)
		require.Equal(t, "acquired", (<-changes).Event)
		// Deleted right after a renewal (the key's TTL back near the
		// lease's), so that the thief takes the key before the next one:
		// a renewal in between would find the key free, which the gateway
		// also takes for a release (seen once on a loaded machine).
		lockKey := "lockgw:{" + key + "}:lock"
		require.Eventually(t, func() bool {
			left, err := srv.Client().PTTL(ctx, lockKey).Result()
			return err == nil && left > 900*time.Millisecond
		}, 5*time.Second, 2*time.Millisecond, "a renewal of the hold")
		require.NoError(t, srv.Client().Del(ctx, lockKey).Err())
		// Not fn's ctx: the thief's own grant ends it (lost, taken), which
		// on a loaded run came before the thief's answer was read.
		thief, err := c.Acquire(t.Context(), key, client.AcquireOptions{TTL: 10 * time.Second})
		require.NoError(t, err)
		assert.Greater(t, thief.Fence, lease.Fence)
		<-ctx.Done()
		return errors.New("work interrupted")
	})
	require.ErrorIs(t, err, client.ErrLockLost)
	require.ErrorIs(t, err, client.ErrTokenMismatch)
	assert.ErrorContains(t, err, "work interrupted", "fn's own error is kept")
}

// gatewayProcess runs the built cmd/lockgateway on the memory backend, for
// the tests that pause or kill it.
func gatewayProcess(t *testing.T) *chaos.Gateway {
	t.Helper()
	bin, err := chaos.BuildGateway(t.TempDir())
	require.NoError(t, err)
	return chaos.StartGateway(t, bin, map[string]string{"LOCKGW_BACKEND": "memory"})
}

// TestHoldNeverRunsPastTheLease: the gateway is paused (SIGSTOP), so the
// stream goes silent, neither renewed nor lost; fn's context ends when the
// lease does by the last renewal heard, not later, and not at the first
// silence.
func TestHoldNeverRunsPastTheLease(t *testing.T) {
	g := gatewayProcess(t)
	c := newClient(t, g.URL)
	key := apitest.Key(t)
	const ttl = 900 * time.Millisecond

	var paused, ended time.Time
	err := c.Hold(t.Context(), key, client.AcquireOptions{TTL: ttl}, func(ctx context.Context, lease *client.Lease) error {
		// Past the grant's own end first: only renewals heard keep fn
		// running.
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(time.Until(lease.ExpiresAt) + ttl/3):
		}
		g.Pause()
		defer g.Resume()
		paused = time.Now()
		select {
		case <-ctx.Done():
			ended = time.Now()
		case <-time.After(3 * ttl):
			t.Error("fn's context was not cancelled")
		}
		return ctx.Err()
	})
	require.ErrorIs(t, err, client.ErrLockLost)
	require.ErrorIs(t, err, client.ErrUnavailable)
	assert.ErrorContains(t, err, "no renewal was heard")
	took := ended.Sub(paused)
	t.Logf("fn's context ended %v after the gateway was paused (TTL %v, renewals every %v)", took, ttl, ttl/3)
	// Every lease the gateway granted before the pause ends within a TTL
	// of it; the last renewal heard was at most a third of the TTL old
	// (give or take a loaded machine's delays).
	assert.Less(t, took, ttl+100*time.Millisecond, "never (noticeably) past the lease")
	assert.Greater(t, took, ttl/3, "not given up at the first silence")
}

// TestHoldCancelsWhenTheGatewayDies: a gateway killed (SIGKILL) breaks the
// stream, and fn's context ends at once, not at the lease's end.
func TestHoldCancelsWhenTheGatewayDies(t *testing.T) {
	g := gatewayProcess(t)
	c := newClient(t, g.URL)
	const ttl = 3 * time.Second

	var took time.Duration
	err := c.Hold(t.Context(), apitest.Key(t), client.AcquireOptions{TTL: ttl}, func(ctx context.Context, lease *client.Lease) error {
		g.Kill()
		killed := time.Now()
		select {
		case <-ctx.Done():
			took = time.Since(killed)
		case <-time.After(2 * ttl):
			t.Error("fn's context was not cancelled")
		}
		return ctx.Err()
	})
	require.ErrorIs(t, err, client.ErrLockLost)
	require.ErrorIs(t, err, client.ErrUnavailable)
	assert.ErrorContains(t, err, "stream broke")
	t.Logf("fn's context ended %v after the gateway was killed (TTL %v)", took, ttl)
	assert.Less(t, took, ttl/3, "at once, not at the lease's end")
}

// TestHoldEndsWhenTheGatewayStops: a gateway shutting down releases the
// lease and ends the hold (ended, shutdown); fn's context ends at once.
func TestHoldEndsWhenTheGatewayStops(t *testing.T) {
	g := memoryGateway(t)
	c := newClient(t, g.URL)
	const ttl = 3 * time.Second

	var took time.Duration
	err := c.Hold(t.Context(), apitest.Key(t), client.AcquireOptions{TTL: ttl}, func(ctx context.Context, lease *client.Lease) error {
		stopping := time.Now()
		go func() { assert.NoError(t, g.Stop()) }()
		select {
		case <-ctx.Done():
			took = time.Since(stopping)
		case <-time.After(2 * ttl):
			t.Error("fn's context was not cancelled")
		}
		return ctx.Err()
	})
	require.ErrorIs(t, err, client.ErrLockLost)
	require.ErrorIs(t, err, client.ErrUnavailable)
	assert.ErrorContains(t, err, "ended (shutdown)")
	assert.Less(t, took, ttl/3, "at once, not at the lease's end")
}

// TestHoldLostWhenRedisPauses: with Redis paused the gateway cannot renew
// the lease; the stream says lost (backend-unavailable) before the lease
// ends, and fn's context ends then.
func TestHoldLostWhenRedisPauses(t *testing.T) {
	srv := redistest.Start(t)
	g := apitest.Start(t, map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_URL": srv.URL(), "LOCKGW_BACKEND_TIMEOUT": "200ms"})
	c := newClient(t, g.URL)
	// The gateway says lost a tenth of the TTL before the lease's end,
	// where this client's own deadline lies: 200 ms for the event to
	// arrive on a loaded machine.
	const ttl = 2 * time.Second

	var took time.Duration
	err := c.Hold(t.Context(), apitest.Key(t), client.AcquireOptions{TTL: ttl}, func(ctx context.Context, lease *client.Lease) error {
		srv.Pause()
		defer srv.Resume()
		paused := time.Now()
		select {
		case <-ctx.Done():
			took = time.Since(paused)
		case <-time.After(3 * ttl):
			t.Error("fn's context was not cancelled")
		}
		return ctx.Err()
	})
	require.ErrorIs(t, err, client.ErrLockLost)
	require.ErrorIs(t, err, client.ErrUnavailable)
	assert.ErrorContains(t, err, "lost (backend-unavailable)", "the gateway's word, not the client's own deadline")
	t.Logf("fn's context ended %v after Redis was paused (TTL %v)", took, ttl)
	assert.Less(t, took, ttl, "before the lease could end")
}

func TestHoldReleasesWhenFnFails(t *testing.T) {
	g := memoryGateway(t)
	c := newClient(t, g.URL)
	key := apitest.Key(t)
	boom := errors.New("boom")

	err := c.Hold(t.Context(), key, client.AcquireOptions{}, func(context.Context, *client.Lease) error { return boom })
	require.ErrorIs(t, err, boom)
	_, err = c.Inspect(t.Context(), key)
	require.ErrorIs(t, err, client.ErrNotHeld)

	// The caller's cancellation ends fn and still releases the lock.
	ctx, cancel := context.WithCancel(t.Context())
	err = c.Hold(ctx, key, client.AcquireOptions{}, func(ctx context.Context, _ *client.Lease) error {
		cancel()
		<-ctx.Done()
		return ctx.Err()
	})
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, client.ErrLockLost)
	_, err = c.Inspect(t.Context(), key)
	require.ErrorIs(t, err, client.ErrNotHeld)

	// Held by someone else: Hold does not run fn.
	other, err := c.Acquire(t.Context(), key, client.AcquireOptions{})
	require.NoError(t, err)
	err = c.Hold(t.Context(), key, client.AcquireOptions{}, func(context.Context, *client.Lease) error {
		t.Error("fn ran without the lock")
		return nil
	})
	require.ErrorIs(t, err, client.ErrHeld)
	require.NoError(t, c.Release(t.Context(), key, other.Token))
}

// TestHoldAfterAWaitLongerThanTheTTL: the lease a wait got began when the
// wait ended; Hold used to count it from before the wait, so a wait longer
// than the TTL reported the lock lost at once and cancelled fn.
func TestHoldAfterAWaitLongerThanTheTTL(t *testing.T) {
	g := memoryGateway(t)
	c := newClient(t, g.URL)
	ctx := t.Context()
	key := "hold-after-wait"
	_, err := c.Acquire(ctx, key, client.AcquireOptions{TTL: 1200 * time.Millisecond})
	require.NoError(t, err)

	ran := false
	err = c.Hold(ctx, key, client.AcquireOptions{TTL: 600 * time.Millisecond, Wait: 5 * time.Second}, func(ctx context.Context, lease *client.Lease) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(300 * time.Millisecond): // half the TTL, well before any extend could fail
		}
		ran = true
		return nil
	})
	require.NoError(t, err, "the lease was not lost: it began after the wait")
	assert.True(t, ran)
}

// TestHoldHandOff: Holds that wait for one key on one gateway get it in
// turn as each lets it go, one at a time, and each keeps it until its fn
// returns: its stream does not end at once. (A watch of the key that the
// gateway's hub had read before the grant once told the new holder
// "released", or "taken", as its stream began.)
func TestHoldHandOff(t *testing.T) {
	g := memoryGateway(t)
	c := newClient(t, g.URL)
	key := apitest.Key(t)
	const ttl = time.Second // renewed every third of it: 300 ms once missed a renewal under make test's load

	var running, most atomic.Int32
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			err := c.Hold(t.Context(), key, client.AcquireOptions{TTL: ttl, Wait: 20 * time.Second}, func(ctx context.Context, _ *client.Lease) error {
				n := running.Add(1)
				defer running.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				select {
				case <-ctx.Done():
					return context.Cause(ctx)
				case <-time.After(ttl / 2):
					return nil
				}
			})
			assert.NoError(t, err, "holder %d", i)
		})
	}
	wg.Wait()
	assert.Equal(t, int32(1), most.Load(), "one holder at a time")
}

// TestHoldAtLeast: fn returns at once, and the lock stays held until
// HoldAtLeast has passed since the grant, then it is free: the hold's
// stream closing does not release it, and it is not kept much longer.
// A fn that ran longer than HoldAtLeast is released at once.
func TestHoldAtLeast(t *testing.T) {
	g := memoryGateway(t)
	c := newClient(t, g.URL)
	key := apitest.Key(t)
	const ttl, atLeast = 300 * time.Millisecond, 1500 * time.Millisecond

	// From before the call: the grant comes after it, so the key must stay
	// at least atLeast from here. (A time taken inside fn is later than
	// the grant, and read 6 µs short once on a loaded machine.)
	granted := time.Now()
	err := c.Hold(t.Context(), key, client.AcquireOptions{TTL: ttl, HoldAtLeast: atLeast}, func(context.Context, *client.Lease) error {
		return nil
	})
	require.NoError(t, err)
	_, err = c.Inspect(t.Context(), key)
	require.NoError(t, err, "held after Hold returned")
	require.Eventually(t, func() bool {
		_, err := c.Inspect(t.Context(), key)
		return errors.Is(err, client.ErrNotHeld)
	}, 5*time.Second, 5*time.Millisecond)
	held := time.Since(granted)
	t.Logf("free %v after the grant (HoldAtLeast %v, TTL %v)", held, atLeast, ttl)
	assert.GreaterOrEqual(t, held, atLeast)
	assert.Less(t, held, atLeast+ttl+200*time.Millisecond, "not much longer: at most a renewal's TTL")

	err = c.Hold(t.Context(), key, client.AcquireOptions{TTL: ttl, HoldAtLeast: 100 * time.Millisecond}, func(ctx context.Context, _ *client.Lease) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(200 * time.Millisecond):
			return nil
		}
	})
	require.NoError(t, err)
	_, err = c.Inspect(t.Context(), key)
	require.ErrorIs(t, err, client.ErrNotHeld, "past HoldAtLeast: released when fn returned")
}
