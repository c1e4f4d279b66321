package lockstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/redistest"
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
	token := NewToken()
	digest := digestHex(token)

	testLateRelease(t, s, token, []redis.Scripter{rdb})

	t.Run("a permit", func(t *testing.T) {
		key := "late/permit"
		_, err := s.SemAcquire(ctx, key, PermitRequest{Token: token, Limit: 1, TTL: time.Minute})
		require.NoError(t, err)
		read, err := nodeSemRead(ctx, rdb, key, digest)
		require.NoError(t, err)
		_, err = s.SemExtend(ctx, key, token, time.Second)
		require.NoError(t, err)
		require.ErrorIs(t, nodeSemRelease(ctx, rdb, key, digest, publishAll, read), errMoved)
		require.NoError(t, s.SemRelease(ctx, key, token))
		_, err = s.SemAcquire(ctx, key, PermitRequest{Token: token, Limit: 1, TTL: time.Minute})
		require.NoError(t, err)
		require.ErrorIs(t, nodeSemRelease(ctx, rdb, key, digest, publishAll, read), errMoved)
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
	token := NewToken()
	const key = "forward"
	_, err := s.Acquire(ctx, key, AcquireRequest{Token: token, TTL: 10 * time.Second})
	require.NoError(t, err)
	last := rdb.PExpireTime(ctx, lockKey(key)).Val()
	for i, ttl := range []time.Duration{time.Second, 10 * time.Second, 20 * time.Second, time.Second, 10 * time.Second, 10 * time.Second} {
		if i%2 == 0 {
			_, err = s.Acquire(ctx, key, AcquireRequest{Token: token, TTL: ttl})
		} else {
			_, err = s.Extend(ctx, key, token, ttl)
		}
		require.NoError(t, err)
		at := rdb.PExpireTime(ctx, lockKey(key)).Val()
		require.Greater(t, at, last, "write %d (ttl %v) moved the expiry forward", i, ttl)
		last = at
	}
}

// TestRedlockReleaseDeletesOnlyAsRead is TestReleaseDeletesOnlyAsRead on
// Redlock: a release whose reads were answered and whose deletes land on
// every node only after later requests of the same token were answered
// (docs/safety.md, "Cases", 5). A shorter extend used to change neither
// the value nor the expiry of a lease that lived longer, so the late
// deletes matched and took away, on every node, the lease the extend had
// just been answered for.
func TestRedlockReleaseDeletesOnlyAsRead(t *testing.T) {
	s, srvs := threeNodes(t)
	nodes := make([]redis.Scripter, len(srvs))
	for i, srv := range srvs {
		nodes[i] = srv.Client()
	}
	testLateRelease(t, s, NewToken(), nodes)
}

// testLateRelease stages, on s whose nodes are nodes, the second step of a
// release landing late: its reads were answered, its deletes reach every
// node only after a later request of the same token was answered. Each
// delete must find the lease changed, and leave it.
func testLateRelease(t *testing.T, s Store, token string, nodes []redis.Scripter) {
	ctx := context.Background()
	digest := digestHex(token)
	for _, later := range []struct {
		name   string
		before time.Duration // an extend by this much before the read, if any
		do     func(t *testing.T, key string)
	}{
		{"a new grant", 0, func(t *testing.T, key string) {
			require.NoError(t, s.Release(ctx, key, token))
			_, err := s.Acquire(ctx, key, AcquireRequest{Token: token, TTL: time.Minute})
			require.NoError(t, err)
		}},
		{"a renewal", 0, func(t *testing.T, key string) {
			_, err := s.Acquire(ctx, key, AcquireRequest{Token: token, TTL: time.Minute})
			require.NoError(t, err)
		}},
		{"a shorter renewal", 0, func(t *testing.T, key string) {
			_, err := s.Acquire(ctx, key, AcquireRequest{Token: token, TTL: time.Second})
			require.NoError(t, err)
		}},
		{"an extend", 0, func(t *testing.T, key string) {
			_, err := s.Extend(ctx, key, token, time.Minute)
			require.NoError(t, err)
		}},
		{"a shorter extend", 0, func(t *testing.T, key string) {
			_, err := s.Extend(ctx, key, token, time.Second)
			require.NoError(t, err)
		}},
		// The same short extend once more, or one reusing the recorded
		// length, wrote nothing on Redlock: same value, a lease already
		// longer.
		{"a shorter extend again", time.Second, func(t *testing.T, key string) {
			_, err := s.Extend(ctx, key, token, time.Second)
			require.NoError(t, err)
		}},
		{"an extend by the recorded length", time.Second, func(t *testing.T, key string) {
			_, err := s.Extend(ctx, key, token, 0)
			require.NoError(t, err)
		}},
	} {
		t.Run(later.name, func(t *testing.T) {
			key := "late/" + t.Name()
			_, err := s.Acquire(ctx, key, AcquireRequest{Token: token, TTL: time.Minute})
			require.NoError(t, err)
			if later.before > 0 {
				_, err = s.Extend(ctx, key, token, later.before)
				require.NoError(t, err)
			}
			reads := make([]lockValue, len(nodes))
			for i, n := range nodes {
				reads[i], _, err = nodeInspect(ctx, n, key)
				require.NoError(t, err)
			}
			later.do(t, key)
			for i, n := range nodes {
				require.ErrorIs(t, nodeRelease(ctx, n, key, digest, reads[i], true), errMoved, "node %d: the late delete finds the lease changed", i)
			}
			_, err = s.Inspect(ctx, key)
			require.NoError(t, err, "and leaves it")
		})
	}
}

// TestRedlockPermitReleaseDeletesOnlyAsRead: the same for a permit, whose
// value carries its expiry: an extend by the permit's own length, on a
// permit already longer, left the value as the release read it.
func TestRedlockPermitReleaseDeletesOnlyAsRead(t *testing.T) {
	s, srvs := threeNodes(t)
	ctx := context.Background()
	token := NewToken()
	digest := digestHex(token)
	key := "late/permit"

	_, err := s.SemAcquire(ctx, key, PermitRequest{Token: token, Limit: 1, TTL: time.Minute})
	require.NoError(t, err)
	_, err = s.SemExtend(ctx, key, token, time.Second)
	require.NoError(t, err)
	reads := make([]semValue, len(srvs))
	for i, srv := range srvs {
		reads[i], err = nodeSemRead(ctx, srv.Client(), key, digest)
		require.NoError(t, err)
	}
	_, err = s.SemExtend(ctx, key, token, time.Second)
	require.NoError(t, err)
	for i, srv := range srvs {
		require.ErrorIs(t, nodeSemRelease(ctx, srv.Client(), key, digest, publishAll, reads[i]), errMoved, "node %d", i)
	}
	st, err := s.SemInspect(ctx, key)
	require.NoError(t, err)
	assert.Len(t, st.Holders, 1, "the permit stays")
}

// threeNodes is a ready Redlock over three fresh redis-servers.
func threeNodes(t *testing.T) (*Redlock, []*redistest.Server) {
	srvs := []*redistest.Server{redistest.Start(t), redistest.Start(t), redistest.Start(t)}
	urls := make([]string, len(srvs))
	for i, srv := range srvs {
		urls[i] = srv.URL()
	}
	s, err := OpenRedlock(urls, RedlockOptions{NodeTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.Eventually(t, func() bool { return s.Ping(context.Background()) == nil }, 10*time.Second, 10*time.Millisecond)
	return s, srvs
}
