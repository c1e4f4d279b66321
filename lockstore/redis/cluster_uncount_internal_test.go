package redis

// A Cluster's uncount (cluster_quota.go) takes a lock out of its user's
// quota set. Found by review: as a plain ZREM with no deadline, sent again
// by go-redis's ClusterClient after a reset (or simply late), its first
// copy landed after a later grant of the same token counted the same
// member again, and the user's count went too low (docs/redis-cluster.md
// promises "too high for a while, never too low"): one lock over the cap.
// uncount.lua carries rule D's deadline, and the refused acquire is
// answered only once it has passed.

import (
	"context"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/stretchr/testify/require"
)

func TestClusterLateUncountLeavesLaterCounts(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	d := &trapDialer{}
	s := trappedClusterStore(t, c, d, 3*time.Second)
	ctx := context.Background()
	q := lockstore.Quota{User: "u", Max: 2}
	for _, m := range c.Masters { // loaded, as on a cluster that has been serving
		require.NoError(t, script.UncountScript.Load(ctx, m.Client()).Err())
	}

	other, err := s.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 30 * time.Second})
	require.NoError(t, err)

	// A waiter's try (or a client's PUT) with token tok: the place is
	// reserved, the key is held, the place is given back (uncount.lua);
	// its first copy breaks and reaches Redis 1.5 s later, go-redis sends
	// it again.
	tr := d.arm(script.UncountScript.Hash(), 1500*time.Millisecond, 1)
	tok := lockstore.NewToken()
	_, err = s.Acquire(ctx, "k", lockstore.AcquireRequest{Token: tok, TTL: 30 * time.Second, Quota: q})
	require.ErrorIs(t, err, lockstore.ErrHeld)
	require.EqualValues(t, 1, tr.hits.Load(), "the trap caught the uncount")

	// The holder lets go; the same token takes the key (counted: 1 of 2),
	// and the user takes a second key (2 of 2).
	require.NoError(t, s.Release(ctx, "k", other.Token))
	_, err = s.Acquire(ctx, "k", lockstore.AcquireRequest{Token: tok, TTL: 30 * time.Second, Quota: q})
	require.NoError(t, err)
	_, err = s.Acquire(ctx, "k2", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 30 * time.Second, Quota: q})
	require.NoError(t, err)

	d.late.Wait() // the first copy has landed, before the 409 (now) or after it

	_, err = s.Acquire(ctx, "k3", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 30 * time.Second, Quota: q})
	if err == nil {
		t.Errorf("quota: user u holds 3 locks with max 2: a late uncount removed the count of a later grant")
	} else {
		var capErr *lockstore.CapError
		require.ErrorAs(t, err, &capErr)
	}
}
