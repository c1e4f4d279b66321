package lockstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/lockstoretest"
	"github.com/lockgateway/lockgateway/lockstore/memory"
	"github.com/lockgateway/lockgateway/lockstore/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The semaphore suite on every backend. Where the backend is shared
// (Redis, Redlock) each store the suite asks for is a client of its own:
// another gateway.

func TestRedisSemaphores(t *testing.T) {
	srv := redistest.Start(t)
	lockstoretest.RunSemaphores(t, func(t *testing.T) lockstore.Semaphores { return backendtest.NewRedis(t, srv) }, true)
}

func TestRedisClusterSemaphores(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	lockstoretest.RunSemaphores(t, func(t *testing.T) lockstore.Semaphores { return backendtest.NewCluster(t, c) }, true)
}

// Redlock waits without a queue: no FIFO.
func TestRedlockSemaphores(t *testing.T) {
	t.Parallel()
	urls := backendtest.URLs(backendtest.StartNodes(t, 5))
	lockstoretest.RunSemaphores(t, func(t *testing.T) lockstore.Semaphores {
		return backendtest.OpenRedlock(t, urls, redlock.Options{NodeTimeout: backendtest.Roomy})
	}, false)
}

// BenchmarkSemaphoreCycle is acquire+release of a permit, against a lock's
// acquire+release on the same backend, one client at a time: what the
// semaphore scripts (which read every held permit: O(holders)) cost over a
// lock's. held is how many other permits are held meanwhile.
func BenchmarkSemaphoreCycle(b *testing.B) {
	srv := redistest.Start(b)
	stores := map[string]interface {
		lockstore.Store
		lockstore.Semaphores
	}{"memory": memory.New(), "redis": backendtest.NewRedis(b, srv)}
	for _, name := range []string{"memory", "redis"} {
		s := stores[name]
		ctx := context.Background()
		b.Run(name+"/lock", func(b *testing.B) {
			for b.Loop() {
				l, err := s.Acquire(ctx, "bench/lock", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Release(ctx, "bench/lock", l.Token); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, held := range []int{0, 100} {
			b.Run(fmt.Sprintf("%s/permit/held=%d", name, held), func(b *testing.B) {
				key := fmt.Sprintf("bench/sem-%d", held)
				req := func() lockstore.PermitRequest {
					return lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Minute, Limit: 1000}
				}
				for range held {
					if _, err := s.SemAcquire(ctx, key, req()); err != nil {
						b.Fatal(err)
					}
				}
				for b.Loop() {
					p, err := s.SemAcquire(ctx, key, req())
					if err != nil {
						b.Fatal(err)
					}
					if err := s.SemRelease(ctx, key, p.Token); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestRedisPermitWaiterRidesOutAnOutage: as TestRedisWaiterRidesOutAnOutage,
// for a permit.
func TestRedisPermitWaiterRidesOutAnOutage(t *testing.T) {
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	ctx := context.Background()
	req := func(wait time.Duration) lockstore.PermitRequest {
		return lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Second, Limit: 1, Wait: wait}
	}
	_, err := s.SemAcquire(ctx, "k", req(0))
	require.NoError(t, err)
	go func() {
		time.Sleep(300 * time.Millisecond)
		srv.Kill() // the holder's permit ends while Redis is away
		time.Sleep(1700 * time.Millisecond)
		srv.Start()
	}()
	start := time.Now()
	_, err = s.SemAcquire(ctx, "k", req(8*time.Second))
	require.NoError(t, err, "the waiter gave up while Redis was away")
	assert.Greater(t, time.Since(start), 2*time.Second, "granted only once Redis was back")
}

// TestSemaphoreAndLockKeysApart: the lock "sem:x" and the semaphore "x"
// share no Redis key. They did when a semaphore's keys were tagged
// {sem:<key>}: the lock's fence counter was the semaphore's (each script
// overwrote the other's, and acquire.lua read "<fence>:<digest>" as 0, so a
// lock fence no longer rested on its counter), and their waiters queued as
// one. Both are held here, with waiters, while every key is read.
func TestSemaphoreAndLockKeysApart(t *testing.T) {
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	ctx := backendtest.Ctx(t)

	l, err := s.Acquire(ctx, "sem:x", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 5 * time.Second})
	require.NoError(t, err)
	p, err := s.SemAcquire(ctx, "x", lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: 5 * time.Second, Limit: 1})
	require.NoError(t, err)
	// A waiter on each, so the queues and heartbeats exist too.
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() {
		_, _ = s.Acquire(wctx, "sem:x", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second, Wait: 5 * time.Second})
		done <- struct{}{}
	}()
	go func() {
		_, _ = s.SemAcquire(wctx, "x", lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Second, Limit: 1, Wait: 5 * time.Second})
		done <- struct{}{}
	}()
	c := srv.Client()
	require.Eventually(t, func() bool {
		return c.Exists(ctx, "lockgw:{sem:x}:queue").Val() == 1 && c.Exists(ctx, "lockgw:{sem#x}:queue").Val() == 1
	}, 5*time.Second, 10*time.Millisecond, "both waiters queued, each in its own queue")

	lockKeys, err := c.Keys(ctx, "lockgw:{sem:x}:*").Result()
	require.NoError(t, err)
	semKeys, err := c.Keys(ctx, "lockgw:{sem#x}:*").Result()
	require.NoError(t, err)
	assert.Subset(t, lockKeys, []string{"lockgw:{sem:x}:lock", "lockgw:{sem:x}:fence", "lockgw:{sem:x}:queue", "lockgw:{sem:x}:alive"})
	assert.Subset(t, semKeys, []string{"lockgw:{sem#x}:permits", "lockgw:{sem#x}:fence", "lockgw:{sem#x}:queue", "lockgw:{sem#x}:alive"})
	assert.NotContains(t, lockKeys, "lockgw:{sem:x}:permits", "nothing of the semaphore's among the lock's keys")

	// The lock's counter is its own: a plain fence, the lock's.
	f, err := c.Get(ctx, "lockgw:{sem:x}:fence").Int64()
	require.NoError(t, err, "the lock's counter holds a plain number")
	assert.Equal(t, l.Fence, f)
	st, err := s.SemInspect(ctx, "x")
	require.NoError(t, err)
	require.Len(t, st.Holders, 1)
	assert.Equal(t, p.Fence, st.Holders[0].Fence)

	stop()
	<-done
	<-done
}
