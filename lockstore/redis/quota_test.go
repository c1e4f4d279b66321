package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRedisQuotaData: what a counted lock leaves in Redis (its user in the
// lock's value, the lock in the user's set, scored by its expiry, and a set
// that lives as long as its last lock), and how many scripts each
// operation runs: one with a right hint, two without.
func TestRedisQuotaData(t *testing.T) {
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	rdb := srv.Client()
	ctx := context.Background()
	user := "ip:2001:db8::/64"
	set := "lockgw:{quota:ip%3A2001%3Adb8%3A%3A/64}:locks"
	q := lockstore.Quota{User: user, Max: 2}

	// Load the scripts, so that no NOSCRIPT round trip counts below.
	warm, err := s.Acquire(ctx, "warm-up", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)
	_, err = s.Extend(ctx, "warm-up", warm.Token, time.Minute)
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, "warm-up", warm.Token))

	l, err := s.Acquire(ctx, "jobs/a", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute, Owner: "w:1", Quota: q})
	require.NoError(t, err)
	got, err := s.Inspect(ctx, "jobs/a")
	require.NoError(t, err)
	assert.Equal(t, "w:1", got.Owner, "the user's field does not reach the owner")
	assert.Equal(t, l.Fence, got.Fence)
	v, err := rdb.Get(ctx, "lockgw:{jobs/a}:lock").Result()
	require.NoError(t, err)
	assert.Contains(t, v, ":^ip%3A2001%3Adb8%3A%3A/64:", "the value names the user, escaped")

	members, err := rdb.ZRangeWithScores(ctx, set, 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, members, 1)
	assert.Equal(t, "lockgw:{jobs/a}:lock", members[0].Member)
	assertScoreNear(t, rdb, members[0].Score, time.Minute)
	assertTTLNear(t, rdb, set, time.Minute)

	calls := func() int64 {
		c, err := srv.CommandCalls(ctx)
		require.NoError(t, err)
		return c["evalsha"] + c["eval"] + c["fcall"]
	}
	before := calls()
	_, err = s.Extend(lockstore.WithUser(ctx, user), "jobs/a", l.Token, 2*time.Minute)
	require.NoError(t, err)
	assert.Equal(t, int64(1), calls()-before, "an extend with the right hint is one script")
	assertTTLNear(t, rdb, set, 2*time.Minute)
	score, err := rdb.ZScore(ctx, set, "lockgw:{jobs/a}:lock").Result()
	require.NoError(t, err)
	assertScoreNear(t, rdb, score, 2*time.Minute)

	before = calls()
	require.NoError(t, s.Release(ctx, "jobs/a", l.Token))
	assert.Equal(t, int64(1), calls()-before, "a release deletes the lease as the extend left it (rule V3), whose value names whom it counts against")
	n, err := rdb.Exists(ctx, set).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the user's last lock released: the set is gone")

	// Without a cap, nothing is counted and no set is named.
	before = calls()
	l, err = s.Acquire(ctx, "jobs/b", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, "jobs/b", l.Token))
	assert.Equal(t, int64(2), calls()-before, "an acquire, and a release of the lease as the grant left it")
	keys, err := rdb.Keys(ctx, "lockgw:{quota:*").Result()
	require.NoError(t, err)
	assert.Empty(t, keys)
}

func assertScoreNear(t *testing.T, rdb *redis.Client, score float64, ttl time.Duration) {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	require.NoError(t, err)
	left := time.Duration(int64(score)-now.UnixMilli()) * time.Millisecond
	assert.InDelta(t, ttl.Seconds(), left.Seconds(), 1, "the score is the lock's expiry")
}

func assertTTLNear(t *testing.T, rdb *redis.Client, key string, ttl time.Duration) {
	t.Helper()
	got, err := rdb.PTTL(context.Background(), key).Result()
	require.NoError(t, err)
	assert.InDelta(t, ttl.Seconds(), got.Seconds(), 1, "%s lives as long as its last lock", key)
}

// TestRedisQuotaOutOfMemory: a Redis out of memory refuses a counted
// acquire whole (ErrRefused, nothing in the set), as it does an uncounted
// one: the count only reads before the script's first write, where Redis
// checks memory. A counted lock is still extended and released.
func TestRedisQuotaOutOfMemory(t *testing.T) {
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	ctx := lockstore.WithUser(context.Background(), "user:a")
	q := lockstore.Quota{User: "user:a", Max: 10}
	held, err := s.Acquire(ctx, "held", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute, Quota: q})
	require.NoError(t, err)

	srv.Fill("8mb")
	_, err = s.Acquire(ctx, "fresh", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute, Quota: q})
	require.ErrorIs(t, err, lockstore.ErrRefused)
	members, err := srv.Client().ZRange(context.Background(), "lockgw:{quota:user%3Aa}:locks", 0, -1).Result()
	require.NoError(t, err)
	assert.Equal(t, []string{"lockgw:{held}:lock"}, members)

	_, err = s.Extend(ctx, "held", held.Token, 2*time.Minute)
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, "held", held.Token))
}

// BenchmarkRedisLiveLock measures what a live lock costs Redis (B/lock,
// from used_memory): the lock and its fence counter, and with a quota its
// place in the user's set (100 users). Run with -benchtime=100000x.
func BenchmarkRedisLiveLock(b *testing.B) {
	for _, counted := range []bool{false, true} {
		b.Run(fmt.Sprintf("quota=%v", counted), func(b *testing.B) {
			srv := redistest.Start(b)
			s := backendtest.NewRedis(b, srv)
			rdb := srv.Client()
			ctx := context.Background()
			before := redistest.UsedMemory(b, rdb)
			b.ResetTimer()
			for i := range b.N {
				req := lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Hour, Owner: "worker-7"}
				if counted {
					req.Quota = lockstore.Quota{User: fmt.Sprintf("ip:10.0.0.%d", i%100), Max: b.N}
				}
				if _, err := s.Acquire(ctx, fmt.Sprintf("jobs/nightly-%08d", i), req); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(redistest.UsedMemory(b, rdb)-before)/float64(b.N), "B/lock")
		})
	}
}
