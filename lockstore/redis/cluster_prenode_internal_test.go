package redis

// New installs script.CopyHook through OnNewNode, which go-redis runs only
// for node clients created afterwards. A Cluster client that ran a command
// before New (here a Ping, and the cluster state it loaded) keeps node
// clients without the hook (found by review): a deadlined call through them
// then answers only once its deadline has passed, whatever its copies did,
// so the protection against resent copies holds, at the cost of latency.
// Open calls New on a fresh client.

import (
	"context"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

func TestClusterClientUsedBeforeNewFailsSafe(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	d := &trapDialer{}
	timeout := time.Second
	cc := trappedClusterClient(c, d, timeout)
	ctx := context.Background()
	// Something runs on the client before New: every node is created now.
	require.NoError(t, cc.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() }))
	s := New(cc)
	t.Cleanup(func() { _ = s.Close() })
	key := "resend-grant-prenode"

	holder, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 30 * time.Second})
	require.NoError(t, err)
	tr := d.arm(script.AcquireScript.Hash(), 500*time.Millisecond, 1) // before the deadline
	actx, cancel := context.WithTimeout(ctx, timeout)
	start := time.Now()
	_, err = s.Acquire(actx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 30 * time.Second})
	cancel()
	answered := time.Since(start)
	require.EqualValues(t, 1, tr.hits.Load())
	require.ErrorIs(t, err, lockstore.ErrHeld)
	require.NoError(t, s.Release(ctx, key, holder.Token))
	d.late.Wait()
	if l, err := s.Inspect(ctx, key); err == nil {
		t.Errorf("nodes created before New have no CopyHook: the acquire answered 409 after %v granted the key later (fence %d)", answered.Round(time.Millisecond), l.Fence)
	} else {
		require.ErrorIs(t, err, lockstore.ErrNotHeld)
	}
}
