package redis

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/lockgateway/lockgateway/lockstore/internal/scripttest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestForceReleaseDeletesOnlyAsRead: a forced release deletes only the
// lease it read, as a release does (rule V2), with the holder's digest
// from the read in place of a caller's.
func TestForceReleaseDeletesOnlyAsRead(t *testing.T) {
	srv := redistest.Start(t)
	holder := openInternal(t, srv)
	ctx := context.Background()

	forcing := func(t *testing.T, sha string, hook func()) (*Store, *atomic.Int64) {
		admin := openInternal(t, srv)
		calls := new(atomic.Int64)
		admin.scripts = scripttest.BeforeScript{Scripter: admin.scripts, Sha: sha, Hook: hook, Calls: calls}
		return admin, calls
	}

	t.Run("a late delete after a renewal", func(t *testing.T) {
		key, token := "force/late", lockstore.NewToken()
		_, err := holder.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: time.Minute})
		require.NoError(t, err)
		read, _, err := script.Inspect(ctx, holder.scripts, key)
		require.NoError(t, err)
		_, err = holder.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: time.Minute})
		require.NoError(t, err)
		require.ErrorIs(t, script.Release(ctx, scripttest.Clocked(srv.Client()), key, read.Digest, read, false), script.ErrMoved)
		_, err = holder.Inspect(ctx, key)
		require.NoError(t, err, "the renewed lease stays")
	})

	t.Run("the holder renewed between read and delete", func(t *testing.T) {
		key, token := "force/renewed", lockstore.NewToken()
		l, err := holder.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: time.Minute})
		require.NoError(t, err)
		admin, calls := forcing(t, script.ReleaseScript.Hash(), func() {
			_, err := holder.Extend(ctx, key, token, 2*time.Minute)
			require.NoError(t, err)
		})
		got, err := admin.ForceRelease(ctx, key, 0)
		require.NoError(t, err)
		assert.Equal(t, l.Fence, got.Fence)
		assert.EqualValues(t, 2, calls.Load(), "the first delete found the lease changed and deleted nothing; the holder's lease, read again, went")
		_, err = holder.Inspect(ctx, key)
		require.ErrorIs(t, err, lockstore.ErrNotHeld)
	})

	t.Run("another holder took the key between read and delete", func(t *testing.T) {
		key, token := "force/taken", lockstore.NewToken()
		_, err := holder.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: time.Minute})
		require.NoError(t, err)
		var next lockstore.Lease
		admin, calls := forcing(t, script.ReleaseScript.Hash(), func() {
			require.NoError(t, holder.Release(ctx, key, token))
			next, err = holder.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
			require.NoError(t, err)
		})
		_, err = admin.ForceRelease(ctx, key, 0)
		require.ErrorIs(t, err, lockstore.ErrNotHeld, "the lease it read is gone")
		assert.EqualValues(t, 1, calls.Load())
		l, err := holder.Inspect(ctx, key)
		require.NoError(t, err, "the new holder's lease stays")
		assert.Equal(t, next.Fence, l.Fence)
	})

	t.Run("a permit renewed between read and delete", func(t *testing.T) {
		key, token := "force/permit", lockstore.NewToken()
		p, err := holder.SemAcquire(ctx, key, lockstore.PermitRequest{Token: token, Limit: 2, TTL: time.Minute})
		require.NoError(t, err)
		admin, calls := forcing(t, script.SemReleaseScript.Hash(), func() {
			_, err := holder.SemExtend(ctx, key, token, 2*time.Minute)
			require.NoError(t, err)
		})
		got, err := admin.SemForceRelease(ctx, key, p.Fence)
		require.NoError(t, err)
		assert.Equal(t, p.Fence, got.Fence)
		assert.EqualValues(t, 2, calls.Load(), "the first delete found the permit changed")
		_, err = holder.SemInspect(ctx, key)
		require.ErrorIs(t, err, lockstore.ErrNotHeld)
	})
}
