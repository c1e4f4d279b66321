package redis_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/lockstoretest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRedisConformance(t *testing.T) {
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	lockstoretest.Run(t, func(t *testing.T) lockstore.Store { return s })
}

// TestRedisQuota runs the quota suite on two clients of one Redis, as two
// gateways would be.
func TestRedisQuota(t *testing.T) {
	srv := redistest.Start(t)
	lockstoretest.RunQuota(t, func(t *testing.T) lockstore.Store { return backendtest.NewRedis(t, srv) })
}

func TestRedisWait(t *testing.T) {
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	lockstoretest.RunWait(t, func(t *testing.T) lockstore.Store { return s }, true)
}

func TestRedisStoresOnlyTokenDigests(t *testing.T) {
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
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
	s := backendtest.NewRedis(t, srv)
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
	s := backendtest.NewRedis(t, srv)
	ctx := context.Background()
	require.NoError(t, s.Ping(ctx))
	srv.Kill()

	_, err := s.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.ErrorIs(t, err, lockstore.ErrUnavailable)
	require.ErrorIs(t, s.Ping(ctx), lockstore.ErrUnavailable)
	require.ErrorIs(t, s.Release(ctx, "k", lockstore.NewToken()), lockstore.ErrUnavailable)
}

// TestRedisWaitersDoNotPoll: 50 clients wait for a held lock. Waiters
// sleep until notified; their gateway refreshes one heartbeat for all of
// them about once a second, so Redis work does not grow with the number of
// waiters (issue #17's goal: at most 0.1 script per waiter per second).
// The scripts are counted while all 50 are in line, as in
// TestRedisSemWaitersDoNotPoll.
func TestRedisWaitersDoNotPoll(t *testing.T) {
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	ctx := context.Background()
	scripts := func() int64 {
		calls, err := srv.CommandCalls(ctx)
		require.NoError(t, err)
		return calls["evalsha"] + calls["eval"] + calls["fcall"]
	}
	const waiters = 50
	for wait := 3 * time.Second; ; wait *= 2 {
		key := "busy" + wait.String()
		holder, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
		require.NoError(t, err)

		var wg sync.WaitGroup
		launched := time.Now()
		for range waiters {
			wg.Go(func() {
				_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second, Wait: wait})
				assert.ErrorIs(t, err, lockstore.ErrHeld)
			})
		}
		// The steady state, between joining the line and leaving it: a
		// waiter with a heartbeat of its own would run a script a second
		// here.
		queue := "lockgw:{" + key + "}:queue"
		require.Eventually(t, func() bool { return srv.Client().ZCard(ctx, queue).Val() == waiters },
			wait, 10*time.Millisecond)
		from := time.Now().Add(200 * time.Millisecond)
		until := from.Add(2 * time.Second)
		if end := launched.Add(wait - 200*time.Millisecond); end.Before(until) {
			until = end
		}
		if until.Sub(from) < time.Second && wait < 12*time.Second {
			t.Logf("%d waiters took %v to join a %v wait: again, waiting %v", waiters, time.Since(launched), wait, 2*wait)
			wg.Wait()
			continue
		}
		time.Sleep(time.Until(from))
		before := scripts()
		time.Sleep(time.Until(until))
		measured := time.Since(from)
		perWaiterPerSecond := float64(scripts()-before) / waiters / measured.Seconds()
		wg.Wait()
		t.Logf("%.3f scripts per waiter per second while waiting (%v counted)", perWaiterPerSecond, measured.Round(time.Millisecond))
		assert.LessOrEqual(t, perWaiterPerSecond, 0.1, "waiters poll, or each refreshes a heartbeat of its own")

		// And the line is clean once they have gone.
		require.NoError(t, s.Release(ctx, key, holder.Token))
		n, err := srv.Client().Exists(ctx, queue, "lockgw:{"+key+"}:alive").Result()
		require.NoError(t, err)
		assert.Zero(t, n, "no queue left behind")
		return
	}
}

// TestRedisWaiterWokenWithoutNotification: the lock goes free with no
// notification (deleted behind the store's back, as a lost message
// would leave it): the gateway's heartbeat sees its first waiter may take
// it, and wakes it.
func TestRedisWaiterWokenWithoutNotification(t *testing.T) {
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	ctx := context.Background()
	_, err := s.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)
	go func() {
		time.Sleep(200 * time.Millisecond)
		assert.NoError(t, srv.Client().Del(ctx, "lockgw:{k}:lock").Err())
	}()
	start := time.Now()
	_, err = s.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second, Wait: 5 * time.Second})
	require.NoError(t, err, "the heartbeat woke the first waiter")
	t.Logf("granted %v after waiting, with no notification", time.Since(start))
}

// TestRedisWaitersRequeueAfterTheQueueIsLost: a Redis that forgets the
// queue (a restart without persistence) while clients wait: the gateway's
// heartbeat finds its oldest ticket gone, its waiters queue again, and
// every one of them is granted in turn.
func TestRedisWaitersRequeueAfterTheQueueIsLost(t *testing.T) {
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	ctx := context.Background()
	rdb := srv.Client()
	_, err := s.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)

	const waiters = 3
	granted := make(chan lockstore.Lease, waiters)
	for range waiters {
		go func() {
			l, err := s.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute, Wait: 10 * time.Second})
			assert.NoError(t, err)
			granted <- l
		}()
	}
	require.Eventually(t, func() bool { return rdb.ZCard(ctx, "lockgw:{k}:queue").Val() == waiters }, 5*time.Second, 10*time.Millisecond)
	// Forget the queue and the lock, and tell nobody.
	require.NoError(t, rdb.Del(ctx, "lockgw:{k}:queue", "lockgw:{k}:alive", "lockgw:{k}:lock").Err())
	for range waiters {
		select {
		case l := <-granted:
			require.NoError(t, s.Release(ctx, "k", l.Token))
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter was not granted after the queue was lost")
		}
	}
}

// TestRedisDeadWaiterDoesNotBlock: a waiter whose gateway died (it stops
// refreshing its heartbeat) is dropped, and the next in line gets the lock.
func TestRedisDeadWaiterDoesNotBlock(t *testing.T) {
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	ctx := context.Background()
	rdb := srv.Client()
	holder, err := s.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)

	// Waiters of gateways that died: first in line, heartbeats due in
	// 300 ms. "dead" is an older gateway's, with a heartbeat of its own;
	// "gone.1" and "gone.2" share their gateway's.
	now, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	for i, m := range []string{"dead", "gone.1", "gone.2"} {
		require.NoError(t, rdb.ZAdd(ctx, "lockgw:{k}:queue", redis.Z{Score: float64(now.UnixMicro() - 1000 + int64(i)), Member: m}).Err())
	}
	for _, m := range []string{"dead", "gone"} {
		require.NoError(t, rdb.ZAdd(ctx, "lockgw:{k}:alive", redis.Z{Score: float64(now.UnixMilli() + 300), Member: m}).Err())
	}

	go func() {
		time.Sleep(100 * time.Millisecond)
		assert.NoError(t, s.Release(ctx, "k", holder.Token))
	}()
	start := time.Now()
	_, err = s.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second, Wait: 5 * time.Second})
	require.NoError(t, err, "the dead waiter was skipped")
	t.Logf("granted %v after queueing behind a dead waiter", time.Since(start))
	for _, m := range []string{"dead", "gone.1", "gone.2"} {
		_, err := rdb.ZScore(ctx, "lockgw:{k}:queue", m).Result()
		assert.ErrorIs(t, err, redis.Nil, "the dead waiter %s is gone", m)
	}
}

// TestRedisWaiterRidesOutAnOutage: a waiter whose turn comes while Redis
// does not answer keeps trying, with the same token and ticket, until its
// wait runs out, rather than answering 503 at once: thousands of waiters
// joining in one burst, or a failover, must not fail every one of them.
func TestRedisWaiterRidesOutAnOutage(t *testing.T) {
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	ctx := context.Background()
	_, err := s.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
	require.NoError(t, err)
	go func() {
		time.Sleep(300 * time.Millisecond)
		srv.Kill() // the holder's lease ends while Redis is away
		time.Sleep(1700 * time.Millisecond)
		srv.Start()
	}()
	start := time.Now()
	_, err = s.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second, Wait: 8 * time.Second})
	require.NoError(t, err, "the waiter gave up while Redis was away")
	assert.Greater(t, time.Since(start), 2*time.Second, "granted only once Redis was back")
}
