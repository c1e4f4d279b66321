package redlock

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
	scripttest.LateRelease(t, s, lockstore.NewToken(), nodes)
}

// TestRedlockPermitReleaseDeletesOnlyAsRead: the same for a permit, whose
// value carries its expiry: an extend by the permit's own length, on a
// permit already longer, left the value as the release read it.
func TestRedlockPermitReleaseDeletesOnlyAsRead(t *testing.T) {
	s, srvs := threeNodes(t)
	ctx := context.Background()
	token := lockstore.NewToken()
	digest := script.DigestHex(token)
	key := "late/permit"

	_, err := s.SemAcquire(ctx, key, lockstore.PermitRequest{Token: token, Limit: 1, TTL: time.Minute})
	require.NoError(t, err)
	_, err = s.SemExtend(ctx, key, token, time.Second)
	require.NoError(t, err)
	reads := make([]script.SemValue, len(srvs))
	for i, srv := range srvs {
		reads[i], err = script.SemRead(ctx, srv.Client(), key, digest)
		require.NoError(t, err)
	}
	_, err = s.SemExtend(ctx, key, token, time.Second)
	require.NoError(t, err)
	for i, srv := range srvs {
		require.ErrorIs(t, script.SemRelease(ctx, scripttest.Clocked(srv.Client()), key, digest, script.PublishAll, reads[i]), script.ErrMoved, "node %d", i)
	}
	st, err := s.SemInspect(ctx, key)
	require.NoError(t, err)
	assert.Len(t, st.Holders, 1, "the permit stays")
}

// threeNodes is a ready Redlock over three fresh redis-servers.
func threeNodes(t *testing.T) (*Store, []*redistest.Server) {
	srvs := []*redistest.Server{redistest.Start(t), redistest.Start(t), redistest.Start(t)}
	urls := make([]string, len(srvs))
	for i, srv := range srvs {
		urls[i] = srv.URL()
	}
	s, err := Open(urls, Options{NodeTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.Eventually(t, func() bool { return s.Ping(context.Background()) == nil }, 10*time.Second, 10*time.Millisecond)
	return s, srvs
}
