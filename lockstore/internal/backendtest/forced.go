package backendtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/lockstore"
)

// Forcing is a store with locks, permits and forced releases.
type Forcing interface {
	lockstore.Store
	lockstore.Semaphores
	lockstore.Forcer
}

// ForcedRenewals: a renewal (an extend) of a lease or a permit released
// by force answers ErrForced, marking what it answered before (ErrNotHeld
// with the key free, ErrTokenMismatch once another holds it); of one that
// expired or that its token released, not (docs/safety.md, "Forced
// releases"). A grant after the forced release works as before, with a
// higher fence. admin is another store on the same servers (another
// gateway's).
func ForcedRenewals(t *testing.T, s, admin Forcing) {
	ctx := Ctx(t)
	notForced := func(t *testing.T, err error, want error) {
		t.Helper()
		require.ErrorIs(t, err, want)
		assert.NotErrorIs(t, err, lockstore.ErrForced)
	}
	t.Run("lock", func(t *testing.T) {
		key, token := "forced/lock", lockstore.NewToken()
		l, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: time.Minute})
		require.NoError(t, err)
		_, err = admin.ForceRelease(ctx, key, l.Fence)
		require.NoError(t, err)
		_, err = s.Extend(ctx, key, token, time.Minute)
		require.ErrorIs(t, err, lockstore.ErrForced)
		require.ErrorIs(t, err, lockstore.ErrNotHeld, "the key is free")
		assert.NotErrorIs(t, err, lockstore.ErrTokenMismatch)

		other := lockstore.NewToken()
		next, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: other, TTL: time.Minute})
		require.NoError(t, err, "the tombstone keeps nobody out")
		assert.False(t, next.Renewed)
		assert.Greater(t, next.Fence, l.Fence)
		_, err = s.Extend(ctx, key, token, time.Minute)
		require.ErrorIs(t, err, lockstore.ErrForced)
		require.ErrorIs(t, err, lockstore.ErrTokenMismatch, "another holds the key")
		_, err = s.Extend(ctx, key, other, time.Minute)
		require.NoError(t, err, "the new holder's renewals are its own")
		require.NoError(t, s.Release(ctx, key, other))
		_, err = s.Extend(ctx, key, other, time.Minute)
		notForced(t, err, lockstore.ErrNotHeld)

		short := lockstore.NewToken()
		_, err = s.Acquire(ctx, key, lockstore.AcquireRequest{Token: short, TTL: 100 * time.Millisecond})
		require.NoError(t, err)
		time.Sleep(300 * time.Millisecond)
		_, err = s.Extend(ctx, key, short, time.Minute)
		notForced(t, err, lockstore.ErrNotHeld)
	})
	t.Run("permit", func(t *testing.T) {
		key, token := "forced/sem", lockstore.NewToken()
		p, err := s.SemAcquire(ctx, key, lockstore.PermitRequest{Token: token, TTL: time.Minute, Limit: 2})
		require.NoError(t, err)
		keep := lockstore.NewToken()
		_, err = s.SemAcquire(ctx, key, lockstore.PermitRequest{Token: keep, TTL: time.Minute, Limit: 2})
		require.NoError(t, err)
		_, err = admin.SemForceRelease(ctx, key, p.Fence)
		require.NoError(t, err)
		_, err = s.SemExtend(ctx, key, token, time.Minute)
		require.ErrorIs(t, err, lockstore.ErrForced)
		require.ErrorIs(t, err, lockstore.ErrTokenMismatch, "others hold permits")
		require.NoError(t, s.SemRelease(ctx, key, keep))
		_, err = s.SemExtend(ctx, key, token, time.Minute)
		require.ErrorIs(t, err, lockstore.ErrForced)
		require.ErrorIs(t, err, lockstore.ErrNotHeld, "none held")
		_, err = s.SemExtend(ctx, key, keep, time.Minute)
		notForced(t, err, lockstore.ErrNotHeld)

		next, err := s.SemAcquire(ctx, key, lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Minute, Limit: 1})
		require.NoError(t, err, "the tombstone keeps nobody out")
		assert.Greater(t, next.Fence, p.Fence)

		short := lockstore.NewToken()
		_, err = s.SemAcquire(ctx, "forced/sem2", lockstore.PermitRequest{Token: short, TTL: 100 * time.Millisecond, Limit: 1})
		require.NoError(t, err)
		time.Sleep(300 * time.Millisecond)
		_, err = s.SemExtend(ctx, "forced/sem2", short, time.Minute)
		notForced(t, err, lockstore.ErrNotHeld)
	})
}
