package lockstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/lockstoretest"
)

// The semaphore suite on every backend. Where the backend is shared
// (Redis, Redlock) each store the suite asks for is a client of its own:
// another gateway.

func TestMemorySemaphores(t *testing.T) {
	s := lockstore.NewMemory()
	lockstoretest.RunSemaphores(t, func(*testing.T) lockstore.Semaphores { return s }, true)
}

func TestRedisSemaphores(t *testing.T) {
	srv := redistest.Start(t)
	lockstoretest.RunSemaphores(t, func(t *testing.T) lockstore.Semaphores { return newRedisStore(t, srv) }, true)
}

func TestRedisClusterSemaphores(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	lockstoretest.RunSemaphores(t, func(t *testing.T) lockstore.Semaphores { return newClusterStore(t, c) }, true)
}

// Redlock waits without a queue: no FIFO.
func TestRedlockSemaphores(t *testing.T) {
	t.Parallel()
	urls := urlsOf(startNodes(t, 5))
	lockstoretest.RunSemaphores(t, func(t *testing.T) lockstore.Semaphores {
		return openRedlock(t, urls, lockstore.RedlockOptions{NodeTimeout: roomy})
	}, false)
}

// TestMemoryPermitsCountAgainstMaxLocks: LOCKGW_MAX_LOCKS bounds the
// memory of locks and permits together.
func TestMemoryPermitsCountAgainstMaxLocks(t *testing.T) {
	m := lockstore.NewMemoryWith(lockstore.MemoryOptions{MaxLocks: 3})
	ctx := testCtx(t)
	for _, k := range []string{"a", "b"} {
		_, err := m.Acquire(ctx, k, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
		require.NoError(t, err)
	}
	p, err := m.SemAcquire(ctx, "s", lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Minute, Limit: 5})
	require.NoError(t, err)
	_, err = m.SemAcquire(ctx, "s", lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Minute, Limit: 5})
	require.ErrorIs(t, err, lockstore.ErrFull, "a fourth entry")
	_, err = m.Acquire(ctx, "c", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.ErrorIs(t, err, lockstore.ErrFull, "the permit takes a place from locks too")
	require.NoError(t, m.SemRelease(ctx, "s", p.Token))
	_, err = m.Acquire(ctx, "c", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)
}
