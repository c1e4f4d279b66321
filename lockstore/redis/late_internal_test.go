package redis

import (
	"context"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/lockgateway/lockgateway/lockstore/internal/scripttest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReleaseDeletesOnlyAsRead stages the second step of a release landing
// late (docs/safety.md, "Late writes on redis", rule V2): its read was
// answered, its delete reaches Redis only after later requests of the same
// token were answered. TestRedisLateWrites covers a release that gives up
// at its read.
func TestReleaseDeletesOnlyAsRead(t *testing.T) {
	srv := redistest.Start(t)
	s := openInternal(t, srv)
	rdb := srv.Client()
	ctx := context.Background()
	token := lockstore.NewToken()
	digest := script.DigestHex(token)

	scripttest.LateRelease(t, s, token, []redis.Scripter{rdb})

	t.Run("a permit", func(t *testing.T) {
		key := "late/permit"
		_, err := s.SemAcquire(ctx, key, lockstore.PermitRequest{Token: token, Limit: 1, TTL: time.Minute})
		require.NoError(t, err)
		read, err := script.SemRead(ctx, rdb, key, digest)
		require.NoError(t, err)
		_, err = s.SemExtend(ctx, key, token, time.Second)
		require.NoError(t, err)
		require.ErrorIs(t, script.SemRelease(ctx, scripttest.Clocked(rdb), key, digest, script.PublishAll, read), script.ErrMoved)
		require.NoError(t, s.SemRelease(ctx, key, token))
		_, err = s.SemAcquire(ctx, key, lockstore.PermitRequest{Token: token, Limit: 1, TTL: time.Minute})
		require.NoError(t, err)
		require.ErrorIs(t, script.SemRelease(ctx, scripttest.Clocked(rdb), key, digest, script.PublishAll, read), script.ErrMoved)
		st, err := s.SemInspect(ctx, key)
		require.NoError(t, err)
		assert.Len(t, st.Holders, 1, "the new permit stays")
	})
}

// TestExpiryOnlyMovesForward: every write of the token to its lease moves
// the expiry strictly forward, whatever TTL it asks for, even several in
// one millisecond (rule V1), so a lease's value and expiry never repeat.
// (Before, a shorter renewal moved it back, and three requests in one
// millisecond could bring it back to where a grant left it: the WAIT
// take-back recognises a grant by its value and expiry.)
func TestExpiryOnlyMovesForward(t *testing.T) {
	srv := redistest.Start(t)
	s := openInternal(t, srv)
	rdb := srv.Client()
	ctx := context.Background()
	token := lockstore.NewToken()
	const key = "forward"
	_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second})
	require.NoError(t, err)
	last := rdb.PExpireTime(ctx, script.LockKey(key)).Val()
	for i, ttl := range []time.Duration{time.Second, 10 * time.Second, 20 * time.Second, time.Second, 10 * time.Second, 10 * time.Second} {
		if i%2 == 0 {
			_, err = s.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: ttl})
		} else {
			_, err = s.Extend(ctx, key, token, ttl)
		}
		require.NoError(t, err)
		at := rdb.PExpireTime(ctx, script.LockKey(key)).Val()
		require.Greater(t, at, last, "write %d (ttl %v) moved the expiry forward", i, ttl)
		last = at
	}
}
