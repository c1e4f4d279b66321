package redis_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func semRequest(limit int, wait time.Duration) lockstore.PermitRequest {
	return lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Minute, Limit: limit, Wait: wait, Owner: "w"}
}

// TestRedisSemWaitersDoNotPoll: 200 clients wait on a full semaphore. As
// a lock's, they sleep until told; their gateway refreshes one heartbeat
// for all of them about once a second (sem_room.go), so Redis work does not
// grow with the number of waiters: at most 0.1 script per waiter per second
// (before rooms, each ran one a second).
//
// The scripts are counted while all 200 are in line: from 200 ms after the
// last joined until 2 s later, or 200 ms before the first waiter's wait
// ends if that comes first (each leaving runs a script). On a machine so
// loaded that joining leaves less than a second of that, the test runs
// again, waiting twice as long.
func TestRedisSemWaitersDoNotPoll(t *testing.T) {
	srv := redistest.Start(t)
	s := backendtest.NewRedisTimeout(t, srv, 5*time.Second) // 200 calls at once, under load
	ctx := context.Background()
	scripts := func() int64 {
		calls, err := srv.CommandCalls(ctx)
		require.NoError(t, err)
		return calls["evalsha"] + calls["eval"] + calls["fcall"]
	}
	const waiters = 200
	for wait := 3 * time.Second; ; wait *= 2 {
		key := "busy" + wait.String()
		var held []lockstore.Permit
		for range 2 {
			p, err := s.SemAcquire(ctx, key, semRequest(2, 0))
			require.NoError(t, err)
			held = append(held, p)
		}

		var wg sync.WaitGroup
		launched := time.Now()
		for range waiters {
			wg.Go(func() {
				_, err := s.SemAcquire(ctx, key, semRequest(2, wait))
				assert.ErrorIs(t, err, lockstore.ErrSemaphoreFull)
			})
		}
		// The steady state, between joining the line and leaving it.
		queue := "lockgw:{sem#" + key + "}:queue"
		if !assert.Eventually(t, func() bool { return srv.Client().ZCard(ctx, queue).Val() == waiters },
			wait, 10*time.Millisecond, "every waiter in line") {
			wg.Wait() // the waiters assert too: not after the test has ended
			return
		}
		from := time.Now().Add(200 * time.Millisecond)
		until := from.Add(2 * time.Second)
		if end := launched.Add(wait - 200*time.Millisecond); end.Before(until) {
			until = end
		}
		if until.Sub(from) < time.Second && wait < 12*time.Second {
			t.Logf("200 waiters took %v to join a %v wait: again, waiting %v", time.Since(launched), wait, 2*wait)
			wg.Wait()
			continue
		}
		time.Sleep(time.Until(from))
		before := scripts()
		time.Sleep(time.Until(until))
		measured := time.Since(from)
		perWaiterPerSecond := float64(scripts()-before) / waiters / measured.Seconds()
		wg.Wait()
		t.Logf("%.4f scripts per waiter per second while waiting (%v counted)", perWaiterPerSecond, measured.Round(time.Millisecond))
		assert.LessOrEqual(t, perWaiterPerSecond, 0.1, "waiters poll, or each refreshes a heartbeat of its own")

		// And the line is clean once they have gone.
		for _, p := range held {
			require.NoError(t, s.SemRelease(ctx, key, p.Token))
		}
		n, err := srv.Client().Exists(ctx, queue, "lockgw:{sem#"+key+"}:alive").Result()
		require.NoError(t, err)
		assert.Zero(t, n, "no queue left behind")
		return
	}
}

// TestRedisSemWaitersWokenWithoutNotification: the permits of a full
// semaphore vanish with no notification (deleted behind the store's back,
// as lost messages would leave them): the gateway's heartbeat sees its
// first waiter may take one, and that grant tells the next, so every
// waiter is served, the first in line first.
func TestRedisSemWaitersWokenWithoutNotification(t *testing.T) {
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	ctx := context.Background()
	for range 3 {
		_, err := s.SemAcquire(ctx, "k", semRequest(3, 0))
		require.NoError(t, err)
	}
	const waiters = 3
	// The order of grants is the order of fences (a Redis semaphore's
	// fences increase grant by grant); the order in which the calls
	// return is the scheduler's.
	var mu sync.Mutex
	fences := map[int]int64{}
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Go(func() {
			p, err := s.SemAcquire(ctx, "k", semRequest(3, 5*time.Second))
			if assert.NoError(t, err, "waiter %d", i) {
				mu.Lock()
				fences[i] = p.Fence
				mu.Unlock()
			}
		})
		require.Eventually(t, func() bool { return srv.Client().ZCard(ctx, "lockgw:{sem#k}:queue").Val() == int64(i+1) },
			2*time.Second, 5*time.Millisecond)
	}
	start := time.Now()
	require.NoError(t, srv.Client().Del(ctx, "lockgw:{sem#k}:permits", "lockgw:{sem#k}:expiry").Err())
	wg.Wait()
	t.Logf("all granted %v after the permits vanished, with no notification", time.Since(start))
	// With nobody holding a permit, the heartbeat wakes the first in line
	// only (the limit went with the last holder); after that, any of the
	// first k in line may take the k free permits, in any order.
	require.Len(t, fences, waiters, "every waiter was granted")
	for i := 1; i < waiters; i++ {
		assert.Less(t, fences[0], fences[i], "the first in line was served first (waiter %d)", i)
	}
}

// TestRedisSemWaitersRequeueAfterTheQueueIsLost: a Redis that forgets
// the queue and the permits (a restart without persistence) while clients
// wait: the gateway's heartbeat finds its oldest ticket gone, its waiters
// queue again, and every one of them is granted in turn.
func TestRedisSemWaitersRequeueAfterTheQueueIsLost(t *testing.T) {
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	ctx := context.Background()
	rdb := srv.Client()
	_, err := s.SemAcquire(ctx, "k", semRequest(1, 0))
	require.NoError(t, err)

	const waiters = 3
	granted := make(chan lockstore.Permit, waiters)
	for range waiters {
		go func() {
			p, err := s.SemAcquire(ctx, "k", semRequest(1, 10*time.Second))
			assert.NoError(t, err)
			granted <- p
		}()
	}
	require.Eventually(t, func() bool { return rdb.ZCard(ctx, "lockgw:{sem#k}:queue").Val() == waiters }, 5*time.Second, 10*time.Millisecond)
	// Forget the queue and the permits, and tell nobody.
	require.NoError(t, rdb.Del(ctx, "lockgw:{sem#k}:queue", "lockgw:{sem#k}:alive", "lockgw:{sem#k}:permits", "lockgw:{sem#k}:expiry").Err())
	for range waiters {
		select {
		case p := <-granted:
			require.NoError(t, s.SemRelease(ctx, "k", p.Token))
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter was not granted after the queue was lost")
		}
	}
}

// TestRedisSemDeadWaiterDoesNotBlock: the waiters of gateways that died
// (they stop refreshing their heartbeat) are dropped, and the next in
// line gets the permit; the release named a dead ticket, so it is the
// heartbeat that finds the way.
func TestRedisSemDeadWaiterDoesNotBlock(t *testing.T) {
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	ctx := context.Background()
	rdb := srv.Client()
	holder, err := s.SemAcquire(ctx, "k", semRequest(1, 0))
	require.NoError(t, err)

	// First in line, heartbeats due in 300 ms: "dead" is an older
	// gateway's, with a heartbeat of its own; "gone.1" and "gone.2" share
	// their gateway's.
	now, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	for i, m := range []string{"dead", "gone.1", "gone.2"} {
		require.NoError(t, rdb.ZAdd(ctx, "lockgw:{sem#k}:queue", redis.Z{Score: float64(now.UnixMicro() - 1000 + int64(i)), Member: m}).Err())
	}
	for _, m := range []string{"dead", "gone"} {
		require.NoError(t, rdb.ZAdd(ctx, "lockgw:{sem#k}:alive", redis.Z{Score: float64(now.UnixMilli() + 300), Member: m}).Err())
	}

	go func() {
		time.Sleep(100 * time.Millisecond)
		assert.NoError(t, s.SemRelease(ctx, "k", holder.Token))
	}()
	start := time.Now()
	_, err = s.SemAcquire(ctx, "k", semRequest(1, 5*time.Second))
	require.NoError(t, err, "the dead waiters were skipped")
	t.Logf("granted %v after queueing behind dead waiters", time.Since(start))
	for _, m := range []string{"dead", "gone.1", "gone.2"} {
		_, err := rdb.ZScore(ctx, "lockgw:{sem#k}:queue", m).Result()
		assert.ErrorIs(t, err, redis.Nil, "the dead waiter %s is gone", m)
	}
}

// TestRedisSemOlderGatewaysTicketKeepsItsPlace: during a rolling upgrade
// an older gateway's waiter (a ticket without ".", with a heartbeat of its
// own) is first in line: a free permit is owed to it, not to a newcomer,
// and once it has gone the newcomer gets it.
func TestRedisSemOlderGatewaysTicketKeepsItsPlace(t *testing.T) {
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	ctx := context.Background()
	rdb := srv.Client()
	now, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, rdb.ZAdd(ctx, "lockgw:{sem#k}:queue", redis.Z{Score: float64(now.UnixMicro()), Member: "older"}).Err())
	require.NoError(t, rdb.ZAdd(ctx, "lockgw:{sem#k}:alive", redis.Z{Score: float64(now.UnixMilli() + 60_000), Member: "older"}).Err())

	_, err = s.SemAcquire(ctx, "k", semRequest(1, 0))
	require.ErrorIs(t, err, lockstore.ErrSemaphoreFull, "the free permit is the older waiter's")
	p, err := s.SemAcquire(ctx, "k", semRequest(2, 0))
	require.NoError(t, err, "with two free, one is a newcomer's")
	require.NoError(t, s.SemRelease(ctx, "k", p.Token))

	require.NoError(t, rdb.ZRem(ctx, "lockgw:{sem#k}:queue", "older").Err())
	_, err = s.SemAcquire(ctx, "k", semRequest(1, 0))
	require.NoError(t, err, "the older waiter has gone")
}
