package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRedisExtendBatch: one pipeline extends many leases, each answered as
// Extend would: extended (never shortened), not held, held by another, or
// counted against another user than the hint (settled by a plain Extend).
func TestRedisExtendBatch(t *testing.T) {
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	ctx := context.Background()
	var exts []lockstore.Extension
	for i := range 50 {
		// 10 s: the 52 acquires before the batch took over a second
		// under make test's load, and the first leases ran out.
		l, err := s.Acquire(ctx, "batch/"+string(rune('a'+i%26))+string(rune('a'+i/26)), lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 10 * time.Second})
		require.NoError(t, err)
		exts = append(exts, lockstore.Extension{Key: l.Key, Token: l.Token, TTL: time.Minute})
	}
	counted, err := s.Acquire(ctx, "batch/counted", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 10 * time.Second, Quota: lockstore.Quota{User: "u1", Max: 5}})
	require.NoError(t, err)
	held, err := s.Acquire(ctx, "batch/held", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)
	exts = append(exts,
		lockstore.Extension{Key: counted.Key, Token: counted.Token, User: "someone-else", TTL: time.Minute},
		lockstore.Extension{Key: "batch/free", Token: lockstore.NewToken(), TTL: time.Minute},
		lockstore.Extension{Key: held.Key, Token: lockstore.NewToken(), TTL: time.Minute},
		lockstore.Extension{Key: held.Key, Token: held.Token, TTL: time.Second}, // asks for less
	)
	out := s.ExtendBatch(ctx, exts)
	require.Len(t, out, len(exts))
	for i := range 51 {
		require.NoError(t, out[i].Err, exts[i].Key)
		assert.Equal(t, time.Minute, out[i].Lease.Granted)
		got, err := s.Inspect(ctx, exts[i].Key)
		require.NoError(t, err)
		assert.Greater(t, got.Left, 50*time.Second, "%s extended", exts[i].Key)
	}
	assert.ErrorIs(t, out[51].Err, lockstore.ErrNotHeld)
	assert.ErrorIs(t, out[52].Err, lockstore.ErrTokenMismatch)
	require.NoError(t, out[53].Err)
	got, err := s.Inspect(ctx, held.Key)
	require.NoError(t, err)
	assert.Greater(t, got.Left, 50*time.Second, "never shortened")
}
