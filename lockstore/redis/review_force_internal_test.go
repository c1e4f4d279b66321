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

// TestReviewForceByFenceSparesNewGrant (review, forced release): a forced
// release that names fence N reads the lease (fence N, token d); before
// its delete lands (A1: any script may land later), d releases and takes
// the key again with the same token, answered with a new fence N'. The
// forced release's delete finds d's value changed (-2), reads again, finds
// d's new lease and deletes it: a lease granted and answered after the
// forced release's read, of a fence it did not name. docs/api.md: "with
// fence=N only the lease of that fence (... so a page showing an older
// lease cannot free the one that replaced it)"; "a forced release that
// lands late deletes nothing granted ... after its read". The same for a
// permit: SemForceRelease reads the permit of fence N, then reads the
// token's permit again and deletes whatever fence it has now.
func TestReviewForceByFenceSparesNewGrant(t *testing.T) {
	srv := redistest.Start(t)
	holder := openInternal(t, srv)
	ctx := context.Background()
	forcing := func(t *testing.T, sha string, hook func()) *Store {
		admin := openInternal(t, srv)
		admin.scripts = scripttest.BeforeScript{Scripter: admin.scripts, Sha: sha, Hook: hook, Calls: new(atomic.Int64)}
		return admin
	}

	t.Run("lock", func(t *testing.T) {
		key, token := "review/force-lock", lockstore.NewToken()
		l, err := holder.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: time.Minute})
		require.NoError(t, err)
		var again lockstore.Lease
		admin := forcing(t, script.ReleaseScript.Hash(), func() {
			require.NoError(t, holder.Release(ctx, key, token))
			again, err = holder.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: time.Minute})
			require.NoError(t, err)
			require.False(t, again.Renewed)
		})
		got, err := admin.ForceRelease(ctx, key, l.Fence)
		cur, ierr := holder.Inspect(ctx, key)
		require.NoError(t, ierr, "the lease granted (fence %d) after the forced release of fence %d read its lease was deleted by it (it answered fence %d, %v)", again.Fence, l.Fence, got.Fence, err)
		assert.Equal(t, again.Fence, cur.Fence)
		require.ErrorIs(t, err, lockstore.ErrNotHeld, "the lease of fence %d was gone before the delete", l.Fence)
	})

	t.Run("permit", func(t *testing.T) {
		key, token := "review/force-permit", lockstore.NewToken()
		p, err := holder.SemAcquire(ctx, key, lockstore.PermitRequest{Token: token, Limit: 2, TTL: time.Minute})
		require.NoError(t, err)
		var again lockstore.Permit
		admin := forcing(t, script.SemReadScript.Hash(), func() {
			require.NoError(t, holder.SemRelease(ctx, key, token))
			again, err = holder.SemAcquire(ctx, key, lockstore.PermitRequest{Token: token, Limit: 2, TTL: time.Minute})
			require.NoError(t, err)
			require.NotEqual(t, p.Fence, again.Fence)
		})
		got, err := admin.SemForceRelease(ctx, key, p.Fence)
		st, ierr := holder.SemInspect(ctx, key)
		require.NoError(t, ierr, "the permit granted (fence %d) after the forced release of fence %d read its permit was deleted by it (it answered fence %d, %v)", again.Fence, p.Fence, got.Fence, err)
		require.Len(t, st.Holders, 1)
		assert.Equal(t, again.Fence, st.Holders[0].Fence)
		require.ErrorIs(t, err, lockstore.ErrNotHeld, "the permit of fence %d was gone before the delete", p.Fence)
	})
}
