package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"
)

// Rule V3 (docs/safety.md): a release through the gateway that was
// answered the lease's pair runs one script, no read; a pair that is not
// the lease's any more costs the read it saved, and the release still
// deletes the lease as it is.
func TestReleaseWithTheRememberedPair(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s, other := backendtest.NewRedis(t, srv), backendtest.NewRedis(t, srv)

	t.Run("granted here: one script", func(t *testing.T) {
		token := lockstore.NewToken()
		l, err := s.Acquire(ctx, "known/granted", lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second})
		require.NoError(t, err)
		n := scripts(t, srv, func() { require.NoError(t, s.Release(ctx, l.Key, token)) })
		assert.EqualValues(t, 1, n, "the release ran release.lua alone")
		_, err = s.Inspect(ctx, l.Key)
		assert.ErrorIs(t, err, lockstore.ErrNotHeld)
	})

	t.Run("extended here: one script", func(t *testing.T) {
		token := lockstore.NewToken()
		l, err := other.Acquire(ctx, "known/extended", lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second})
		require.NoError(t, err)
		_, err = s.Extend(ctx, l.Key, token, 20*time.Second)
		require.NoError(t, err)
		n := scripts(t, srv, func() { require.NoError(t, s.Release(ctx, l.Key, token)) })
		assert.EqualValues(t, 1, n)
	})

	t.Run("extended elsewhere since: read, then delete", func(t *testing.T) {
		token := lockstore.NewToken()
		l, err := s.Acquire(ctx, "known/stale", lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second})
		require.NoError(t, err)
		_, err = other.Extend(ctx, l.Key, token, 20*time.Second)
		require.NoError(t, err)
		n := scripts(t, srv, func() { require.NoError(t, s.Release(ctx, l.Key, token)) })
		assert.EqualValues(t, 3, n, "the remembered pair refused (changed), a read, a release as read")
		_, err = s.Inspect(ctx, l.Key)
		assert.ErrorIs(t, err, lockstore.ErrNotHeld, "the extended lease was released")
	})

	t.Run("granted again elsewhere with another user: read, then delete", func(t *testing.T) {
		token := lockstore.NewToken()
		l, err := s.Acquire(ctx, "known/user", lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second,
			Quota: lockstore.Quota{Max: 5, User: "ann"}})
		require.NoError(t, err)
		require.NoError(t, other.Release(ctx, l.Key, token))
		_, err = other.Acquire(ctx, l.Key, lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second,
			Quota: lockstore.Quota{Max: 5, User: "bob"}})
		require.NoError(t, err)
		// The remembered pair names ann's set; the lease counts against
		// bob's now (release.lua's {-3, user}): not the lease remembered.
		require.NoError(t, s.Release(ctx, l.Key, token), "the token holds the key: its release succeeds")
		_, err = s.Inspect(ctx, l.Key)
		assert.ErrorIs(t, err, lockstore.ErrNotHeld)
	})

	t.Run("released elsewhere: not held", func(t *testing.T) {
		token := lockstore.NewToken()
		l, err := s.Acquire(ctx, "known/gone", lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second})
		require.NoError(t, err)
		require.NoError(t, other.Release(ctx, l.Key, token))
		assert.ErrorIs(t, s.Release(ctx, l.Key, token), lockstore.ErrNotHeld)
	})

	t.Run("taken by another token: mismatch, left alone", func(t *testing.T) {
		token := lockstore.NewToken()
		l, err := s.Acquire(ctx, "known/taken", lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second})
		require.NoError(t, err)
		require.NoError(t, other.Release(ctx, l.Key, token))
		_, err = other.Acquire(ctx, l.Key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 10 * time.Second})
		require.NoError(t, err)
		assert.ErrorIs(t, s.Release(ctx, l.Key, token), lockstore.ErrTokenMismatch)
		_, err = s.Inspect(ctx, l.Key)
		assert.NoError(t, err, "the other token's lease is still there")
	})
}
