package memory_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/memory"
)

// TestMemoryMaxLocks: the store's own cap is exact, frees a place on a
// release or an expiry, says when the earliest lock expires, and never
// refuses a rate-limit window.
func TestMemoryMaxLocks(t *testing.T) {
	m := memory.NewWith(memory.Options{MaxLocks: 3})
	ctx := context.Background()
	take := func(key string, ttl time.Duration) (lockstore.Lease, error) {
		return m.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: ttl})
	}
	short, err := take("a", 100*time.Millisecond)
	require.NoError(t, err)
	b, err := take("b", 10*time.Second)
	require.NoError(t, err)
	_, err = take("c", 10*time.Second)
	require.NoError(t, err)

	_, err = take("d", time.Second)
	require.ErrorIs(t, err, lockstore.ErrStoreFull)
	var capErr *lockstore.CapError
	require.ErrorAs(t, err, &capErr)
	assert.Equal(t, 3, capErr.Max)
	assert.LessOrEqual(t, capErr.Next, 100*time.Millisecond, "the earliest lock is the short one")
	_, err = m.Inspect(ctx, "d")
	require.ErrorIs(t, err, lockstore.ErrNotHeld, "a refused acquire takes nothing")

	again, err := m.Acquire(ctx, "b", lockstore.AcquireRequest{Token: b.Token, TTL: time.Minute})
	require.NoError(t, err, "a renewal at the cap is not a new lock")
	assert.True(t, again.Renewed)

	left, err := m.TakeWindow(ctx, "ratelimit:user:x", lockstore.NewToken(), time.Second)
	require.NoError(t, err, "a full store still takes rate-limit windows")
	assert.Zero(t, left)
	_, err = take("d", time.Second)
	require.ErrorIs(t, err, lockstore.ErrStoreFull, "and a window takes a place")

	time.Sleep(time.Until(short.ExpiresAt.Add(20 * time.Millisecond)))
	require.NoError(t, m.Release(ctx, "b", b.Token))
	assert.Equal(t, 2, m.Len(), "c and the window")
	_, err = take("d", time.Second)
	require.NoError(t, err, "a release and an expiry freed places")
}

// TestMemoryPermitsCountAgainstMaxLocks: LOCKGW_MAX_LOCKS bounds the
// memory of locks and permits together.
func TestMemoryPermitsCountAgainstMaxLocks(t *testing.T) {
	m := memory.NewWith(memory.Options{MaxLocks: 3})
	ctx := testCtx(t)
	for _, k := range []string{"a", "b"} {
		_, err := m.Acquire(ctx, k, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
		require.NoError(t, err)
	}
	p, err := m.SemAcquire(ctx, "s", lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Minute, Limit: 5})
	require.NoError(t, err)
	_, err = m.SemAcquire(ctx, "s", lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Minute, Limit: 5})
	require.ErrorIs(t, err, lockstore.ErrStoreFull, "a fourth entry")
	_, err = m.Acquire(ctx, "c", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.ErrorIs(t, err, lockstore.ErrStoreFull, "the permit takes a place from locks too")
	require.NoError(t, m.SemRelease(ctx, "s", p.Token))
	_, err = m.Acquire(ctx, "c", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)
}

// BenchmarkMemoryLiveLock measures what one live lock costs the memory
// store in heap (B/lock), with a key and an owner of typical size, counted
// against a user's quota or not (docs/operations.md, Memory and bounds). Run with
// -benchtime=100000x or more: the figure is the heap after the locks less
// the heap before, divided by their number.
func BenchmarkMemoryLiveLock(b *testing.B) {
	for _, counted := range []bool{false, true} {
		b.Run(fmt.Sprintf("quota=%v", counted), func(b *testing.B) {
			m := memory.New()
			ctx := context.Background()
			tokens := make([]string, b.N)
			for i := range tokens {
				tokens[i] = lockstore.NewToken()
			}
			before := heap()
			b.ResetTimer()
			for i := range b.N {
				req := lockstore.AcquireRequest{Token: tokens[i], TTL: time.Hour, Owner: "worker-7"}
				if counted {
					// 100 users, as many clients would.
					req.Quota = lockstore.Quota{User: fmt.Sprintf("ip:10.0.0.%d", i%100), Max: b.N}
				}
				if _, err := m.Acquire(ctx, fmt.Sprintf("jobs/nightly-%08d", i), req); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			tokens = nil
			b.ReportMetric(float64(heap()-before)/float64(b.N), "B/lock")
			runtime.KeepAlive(m)
		})
	}
}

func heap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
