package lockstore_test

import (
	"testing"

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
