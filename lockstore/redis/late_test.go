package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	lockredis "github.com/lockgateway/lockgateway/lockstore/redis"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lateGateway is a Redis store whose path to Redis can turn slow: every
// byte it sends from then on reaches Redis late seconds after it was sent,
// long after the call gave up (a retransmission on an established
// connection). It is the "slow gateway" of docs/safety.md, "Late writes on
// redis".
type lateGateway struct {
	*lockredis.Store
	proxy *redistest.Proxy
	late  time.Duration
}

func newLateGateway(t *testing.T, srv *redistest.Server, late time.Duration) *lateGateway {
	t.Helper()
	p := redistest.NewProxy(t, srv.Addr(), 0)
	s := lockredis.New(redis.NewClient(&redis.Options{
		Addr: p.Addr(), MaxRetries: -1, PoolSize: 1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		ContextTimeoutEnabled: true,
	}))
	t.Cleanup(func() { _ = s.Close() })
	return &lateGateway{Store: s, proxy: p, late: late}
}

// sample has the slow gateway sample Redis's clock (rule D) while its
// path is fast, as a gateway that has been serving does: its grants then
// carry a deadline, and only their own bytes are late.
func (g *lateGateway) sample(t *testing.T) {
	t.Helper()
	_, err := g.Acquire(context.Background(), "late/sample", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
	require.NoError(t, err)
}

// giveUp runs op with the path slow, so that op's calls time out and its
// scripts land later; it checks that op failed as unavailable ("outcome
// unknown": the 503 a client would see).
func (g *lateGateway) giveUp(t *testing.T, op func(ctx context.Context) error) {
	t.Helper()
	// Open the connection (and load the scripts on Redis) while the path
	// is fast, so only op's own bytes are late.
	require.NoError(t, g.Ping(context.Background()))
	g.proxy.SetDelay(g.late)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err := op(ctx)
	cancel()
	require.ErrorIs(t, err, lockstore.ErrUnavailable, "the slow gateway gives up")
}

// TestRedisLateWrites stages the three holes of docs/safety.md, "Late
// writes on redis": a write the gateway gave up on lands after later
// requests were answered, and must not undo them.
func TestRedisLateWrites(t *testing.T) {
	const late = 1500 * time.Millisecond
	srv := redistest.Start(t)
	ctx := context.Background()

	t.Run("extend does not shorten a later answer", func(t *testing.T) {
		slow, fast := newLateGateway(t, srv, late), backendtest.NewRedis(t, srv)
		l, err := fast.Acquire(ctx, "late/extend", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 10 * time.Second})
		require.NoError(t, err)
		slow.giveUp(t, func(ctx context.Context) error {
			_, err := slow.Extend(ctx, l.Key, l.Token, 300*time.Millisecond)
			return err
		})
		extended, err := fast.Extend(ctx, l.Key, l.Token, 30*time.Second)
		require.NoError(t, err)

		time.Sleep(late + 800*time.Millisecond) // the late extend landed, and 300 ms more passed
		_, err = fast.Acquire(ctx, l.Key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
		require.ErrorIs(t, err, lockstore.ErrHeld, "another client took the key while the holder was told it holds it until %v", extended.ExpiresAt)
	})

	t.Run("release does not remove a later grant", func(t *testing.T) {
		slow, fast := newLateGateway(t, srv, late), backendtest.NewRedis(t, srv)
		token := lockstore.NewToken()
		l, err := fast.Acquire(ctx, "late/release", lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second})
		require.NoError(t, err)
		// The slow gateway's release may give up at its read or at its
		// delete; either must be harmless.
		slow.giveUp(t, func(ctx context.Context) error { return slow.Release(ctx, l.Key, token) })
		require.NoError(t, fast.Release(ctx, l.Key, token))
		again, err := fast.Acquire(ctx, l.Key, lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second})
		require.NoError(t, err)
		assert.False(t, again.Renewed, "a new grant")

		time.Sleep(late + 300*time.Millisecond)
		_, err = fast.Acquire(ctx, l.Key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
		require.ErrorIs(t, err, lockstore.ErrHeld, "the late release removed the grant answered after it")
	})

	t.Run("release with a remembered pair does not remove a later grant", func(t *testing.T) {
		// Rule V3: the slow gateway granted the lease, so its release
		// sends the pair it was answered, no read: that one script lands
		// late, after the holder's release and its new grant (a new
		// fence) through the fast gateway were answered.
		slow, fast := newLateGateway(t, srv, late), backendtest.NewRedis(t, srv)
		token := lockstore.NewToken()
		l, err := slow.Acquire(ctx, "late/release-known", lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second})
		require.NoError(t, err)
		n := scripts(t, srv, func() {
			slow.giveUp(t, func(ctx context.Context) error { return slow.Release(ctx, l.Key, token) })
		})
		require.Zero(t, n, "the late release has not landed yet")
		require.NoError(t, fast.Release(ctx, l.Key, token))
		again, err := fast.Acquire(ctx, l.Key, lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second})
		require.NoError(t, err)
		assert.False(t, again.Renewed, "a new grant")

		n = scripts(t, srv, func() { time.Sleep(late + 300*time.Millisecond) })
		require.EqualValues(t, 1, n, "the late release.lua landed, alone: the remembered pair, no read")
		_, err = fast.Acquire(ctx, l.Key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
		require.ErrorIs(t, err, lockstore.ErrHeld, "the late release removed the grant answered after it")
	})

	t.Run("release does not remove a later renewal", func(t *testing.T) {
		slow, fast := newLateGateway(t, srv, late), backendtest.NewRedis(t, srv)
		token := lockstore.NewToken()
		l, err := fast.Acquire(ctx, "late/renewal", lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second})
		require.NoError(t, err)
		slow.giveUp(t, func(ctx context.Context) error { return slow.Release(ctx, l.Key, token) })
		renewed, err := fast.Acquire(ctx, l.Key, lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second})
		require.NoError(t, err)
		require.True(t, renewed.Renewed)

		time.Sleep(late + 300*time.Millisecond)
		_, err = fast.Acquire(ctx, l.Key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
		require.ErrorIs(t, err, lockstore.ErrHeld, "the late release removed the lease a renewal answered after it")
	})

	t.Run("release does not remove a lingering value", func(t *testing.T) {
		// Rule L: a lease with hold_at_least released through the fast
		// gateway (204) lingers until its end; the slow gateway's release
		// of the same lease, landing late, must not free the key sooner.
		slow, fast := newLateGateway(t, srv, late), backendtest.NewRedis(t, srv)
		token := lockstore.NewToken()
		l, err := fast.Acquire(ctx, "late/lingering", lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second, HoldAtLeast: 5 * time.Second})
		require.NoError(t, err)
		slow.giveUp(t, func(ctx context.Context) error { return slow.Release(ctx, l.Key, token) })
		require.NoError(t, fast.Release(ctx, l.Key, token))

		time.Sleep(late + 300*time.Millisecond)
		_, err = fast.Acquire(ctx, l.Key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
		require.ErrorIs(t, err, lockstore.ErrHeld, "the late release freed a key held at least until the end it was granted with")
	})

	t.Run("semaphore release does not remove a later permit", func(t *testing.T) {
		slow, fast := newLateGateway(t, srv, late), backendtest.NewRedis(t, srv)
		token := lockstore.NewToken()
		p, err := fast.SemAcquire(ctx, "late/sem", lockstore.PermitRequest{Token: token, Limit: 1, TTL: 10 * time.Second})
		require.NoError(t, err)
		slow.giveUp(t, func(ctx context.Context) error { return slow.SemRelease(ctx, p.Key, token) })
		require.NoError(t, fast.SemRelease(ctx, p.Key, token))
		_, err = fast.SemAcquire(ctx, p.Key, lockstore.PermitRequest{Token: token, Limit: 1, TTL: 10 * time.Second})
		require.NoError(t, err)

		time.Sleep(late + 300*time.Millisecond)
		_, err = fast.SemAcquire(ctx, p.Key, lockstore.PermitRequest{Token: lockstore.NewToken(), Limit: 1, TTL: time.Second})
		require.True(t, errors.Is(err, lockstore.ErrSemaphoreFull), "a second holder of a semaphore of limit 1: %v", err)
	})

	// Rule D (docs/safety.md, "Late grants"): a grant answered 503 that
	// lands after the holder's later grant and release revives nothing.
	t.Run("grant does not land after its 503", func(t *testing.T) {
		slow, fast := newLateGateway(t, srv, late), backendtest.NewRedis(t, srv)
		slow.sample(t)
		token := lockstore.NewToken()
		slow.giveUp(t, func(ctx context.Context) error {
			_, err := slow.Acquire(ctx, "late/grant", lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second})
			return err
		})
		l, err := fast.Acquire(ctx, "late/grant", lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second})
		require.NoError(t, err)
		require.NoError(t, fast.Release(ctx, l.Key, token))

		time.Sleep(late + 300*time.Millisecond)
		_, err = fast.Acquire(ctx, l.Key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
		require.NoError(t, err, "the grant answered 503 landed after the release and took the key again")
	})

	t.Run("semaphore grant does not land after its 503", func(t *testing.T) {
		slow, fast := newLateGateway(t, srv, late), backendtest.NewRedis(t, srv)
		slow.sample(t)
		token := lockstore.NewToken()
		slow.giveUp(t, func(ctx context.Context) error {
			_, err := slow.SemAcquire(ctx, "late/sem-grant", lockstore.PermitRequest{Token: token, Limit: 1, TTL: 10 * time.Second})
			return err
		})
		p, err := fast.SemAcquire(ctx, "late/sem-grant", lockstore.PermitRequest{Token: token, Limit: 1, TTL: 10 * time.Second})
		require.NoError(t, err)
		require.NoError(t, fast.SemRelease(ctx, p.Key, token))

		time.Sleep(late + 300*time.Millisecond)
		_, err = fast.SemAcquire(ctx, p.Key, lockstore.PermitRequest{Token: lockstore.NewToken(), Limit: 1, TTL: time.Second})
		require.NoError(t, err, "the permit answered 503 landed after the release and took the only place again")
	})

	t.Run("semaphore extend does not shorten a later answer", func(t *testing.T) {
		slow, fast := newLateGateway(t, srv, late), backendtest.NewRedis(t, srv)
		token := lockstore.NewToken()
		p, err := fast.SemAcquire(ctx, "late/sem-extend", lockstore.PermitRequest{Token: token, Limit: 1, TTL: 10 * time.Second})
		require.NoError(t, err)
		slow.giveUp(t, func(ctx context.Context) error {
			_, err := slow.SemExtend(ctx, p.Key, token, 300*time.Millisecond)
			return err
		})
		_, err = fast.SemExtend(ctx, p.Key, token, 30*time.Second)
		require.NoError(t, err)

		time.Sleep(late + 800*time.Millisecond)
		_, err = fast.SemAcquire(ctx, p.Key, lockstore.PermitRequest{Token: lockstore.NewToken(), Limit: 1, TTL: time.Second})
		require.True(t, errors.Is(err, lockstore.ErrSemaphoreFull), "a second holder of a semaphore of limit 1: %v", err)
	})
}
