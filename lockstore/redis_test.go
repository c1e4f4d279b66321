package lockstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/lockstoretest"
)

func newRedisStore(t testing.TB, srv *redistest.Server) *lockstore.Redis {
	t.Helper()
	s := lockstore.NewRedis(redis.NewClient(&redis.Options{
		Addr:                  srv.Addr(),
		MaxRetries:            -1,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		ContextTimeoutEnabled: true,
	}))
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestRedisConformance(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedisStore(t, srv)
	lockstoretest.Run(t, func(t *testing.T) lockstore.Store { return s })
}

func TestRedisStoresOnlyTokenDigests(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedisStore(t, srv)
	ctx := context.Background()
	l, err := s.Acquire(ctx, "jobs/nightly", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute, Owner: "w"})
	require.NoError(t, err)

	rdb := srv.Client()
	keys, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"lockgw:{jobs/nightly}:lock", "lockgw:{jobs/nightly}:fence"}, keys,
		"a lock and its fence share one hash tag")
	for _, k := range keys {
		v, err := rdb.Get(ctx, k).Result()
		require.NoError(t, err)
		assert.NotContains(t, v, l.Token)
		ttl, err := rdb.PTTL(ctx, k).Result()
		require.NoError(t, err)
		assert.Positive(t, ttl, "%s has a TTL", k)
	}
	v, _ := rdb.Get(ctx, "lockgw:{jobs/nightly}:lock").Result()
	assert.True(t, strings.HasSuffix(v, ":w"))
}

// A Redis restarted without persistence forgets its fence counters; fences
// must still go up, because they are seeded from Redis TIME.
func TestRedisFencesSurviveRestartWithoutPersistence(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedisStore(t, srv)
	ctx := context.Background()

	var last int64
	for range 3 {
		l, err := s.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
		require.NoError(t, err)
		require.NoError(t, s.Release(ctx, "k", l.Token))
		last = l.Fence
	}
	srv.Restart()
	n, err := srv.Client().DBSize(ctx).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the restarted Redis is empty")

	require.Eventually(t, func() bool { return s.Ping(ctx) == nil }, 5*time.Second, 10*time.Millisecond)
	l, err := s.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)
	assert.Greater(t, l.Fence, last)
}

func TestRedisUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedisStore(t, srv)
	ctx := context.Background()
	require.NoError(t, s.Ping(ctx))
	srv.Kill()

	_, err := s.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.ErrorIs(t, err, lockstore.ErrUnavailable)
	require.ErrorIs(t, s.Ping(ctx), lockstore.ErrUnavailable)
	require.ErrorIs(t, s.Release(ctx, "k", lockstore.NewToken()), lockstore.ErrUnavailable)
}
