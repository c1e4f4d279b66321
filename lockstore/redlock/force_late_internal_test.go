package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/lockgateway/lockgateway/lockstore/internal/scripttest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRedlockForceDeletesOnlyAsRead stages a forced release's deletes on
// Redlock's nodes with the holder's digest and values as read: after a
// renewal, each single delete finds the lease changed; after another
// holder took the key, the delete step (with its reads again) leaves the
// new lease on every node.
func TestRedlockForceDeletesOnlyAsRead(t *testing.T) {
	s, srvs := threeNodes(t)
	ctx := context.Background()
	readAll := func(t *testing.T, key string) []script.LockValue {
		reads := make([]script.LockValue, len(srvs))
		for i, srv := range srvs {
			var err error
			reads[i], _, err = script.Inspect(ctx, srv.Client(), key)
			require.NoError(t, err)
		}
		return reads
	}

	t.Run("renewed", func(t *testing.T) {
		key, token := "force/late", lockstore.NewToken()
		_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: time.Minute})
		require.NoError(t, err)
		reads := readAll(t, key)
		_, err = s.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: time.Minute})
		require.NoError(t, err)
		for i, srv := range srvs {
			require.ErrorIs(t, script.Release(ctx, scripttest.Clocked(srv.Client()), key, reads[i].Digest, reads[i], false), script.ErrMoved, "node %d", i)
		}
		_, err = s.Inspect(ctx, key)
		require.NoError(t, err, "the renewed lease stays")
	})

	t.Run("taken", func(t *testing.T) {
		key, token := "force/taken", lockstore.NewToken()
		_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: time.Minute})
		require.NoError(t, err)
		reads := readAll(t, key)
		require.NoError(t, s.Release(ctx, key, token))
		next, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
		require.NoError(t, err)
		for i, srv := range srvs {
			require.ErrorIs(t, releaseRead(ctx, scripttest.Clocked(srv.Client()), key, reads[i].Digest, reads[i], true, true), lockstore.ErrTokenMismatch, "node %d", i)
		}
		l, err := s.Inspect(ctx, key)
		require.NoError(t, err, "the new holder's lease stays")
		assert.Equal(t, next.Fence, l.Fence)
		got, err := s.ForceRelease(ctx, key, reads[0].Fence)
		require.ErrorIs(t, err, lockstore.ErrNotHeld, "the fence read names a lease that is gone: got %+v", got)
	})
}
