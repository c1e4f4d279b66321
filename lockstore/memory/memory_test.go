package memory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/lockstoretest"
	"github.com/lockgateway/lockgateway/lockstore/memory"
)

func TestMemoryConformance(t *testing.T) {
	lockstoretest.Run(t, func(t *testing.T) lockstore.Store { return memory.New() })
}

func TestMemoryQuota(t *testing.T) {
	s := memory.New()
	lockstoretest.RunQuota(t, func(t *testing.T) lockstore.Store { return s })
}

func TestMemoryWait(t *testing.T) {
	lockstoretest.RunWait(t, func(t *testing.T) lockstore.Store { return memory.New() }, true)
}

func TestMemoryList(t *testing.T) {
	lockstoretest.RunList(t, func(t *testing.T) lockstore.Store { return memory.New() }, true)
}

func TestMemorySemList(t *testing.T) {
	lockstoretest.RunSemList(t, func(t *testing.T) lockstore.Semaphores { return memory.New() }, true)
}

func TestMemorySemaphores(t *testing.T) {
	s := memory.New()
	lockstoretest.RunSemaphores(t, func(*testing.T) lockstore.Semaphores { return s }, true)
}

func TestMemoryReclaimsExpiredLocks(t *testing.T) {
	m := memory.New()
	ctx := context.Background()
	const ttl = 500 * time.Millisecond // longer than the loop, even on a loaded machine
	start := time.Now()
	for i := range 1000 {
		_, err := m.Acquire(ctx, fmt.Sprintf("k%d", i), lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: ttl})
		require.NoError(t, err)
	}
	if time.Since(start) < ttl {
		assert.Equal(t, 1000, m.Len())
	}
	time.Sleep(time.Until(start.Add(ttl + 100*time.Millisecond)))
	assert.Equal(t, 0, m.Len(), "expired locks are dropped, not kept until touched")
}

func TestMemoryFencesSurviveRestart(t *testing.T) {
	ctx := context.Background()
	l1, err := memory.New().Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
	require.NoError(t, err)
	// A new process starts with an empty store: its fences start above.
	l2, err := memory.New().Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
	require.NoError(t, err)
	assert.Greater(t, l2.Fence, l1.Fence)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
