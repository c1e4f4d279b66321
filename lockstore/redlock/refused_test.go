package redlock_test

import (
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Nodes that answer but refuse writes (out of memory) are not "nodes that
// did not answer": with a majority of them refusing, acquires and Ping say
// so, as lockstore.ErrRefused, and the node stays up (no prober needed).
func TestRedlockNodesRefusingWrites(t *testing.T) {
	t.Parallel()
	srvs := backendtest.StartNodes(t, 3)
	s := backendtest.OpenRedlock(t, backendtest.URLs(srvs), redlock.Options{NodeTimeout: backendtest.Roomy})
	ready(t, s)
	ctx := backendtest.Ctx(t)
	for _, srv := range srvs[:2] {
		require.NoError(t, srv.Client().ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
		require.NoError(t, srv.Client().ConfigSet(ctx, "maxmemory", "1").Err()) // below what it uses: full
	}

	_, err := s.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.ErrorIs(t, err, lockstore.ErrRefused)
	require.ErrorIs(t, err, lockstore.ErrUnavailable)
	var qe *lockstore.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, lockstore.QuorumError{Nodes: 3, Quorum: 2, Failed: 0, Refused: 2}, *qe)
	assert.Equal(t, "2 of 3 Redlock nodes refuse writes (out of memory, read-only or similar: see the node's log); a majority of 2 is impossible", qe.QuorumDetail(),
		"no \"0 of 3 did not answer\": only the reasons that apply")

	perr := s.Ping(ctx)
	require.ErrorIs(t, perr, lockstore.ErrRefused, "readiness says the nodes refuse writes")
	for i, n := range s.Nodes() {
		assert.True(t, n.Up, "node %d answered", i)
	}

	for _, srv := range srvs[:2] {
		require.NoError(t, srv.Client().ConfigSet(ctx, "maxmemory", "0").Err())
	}
	require.NoError(t, s.Ping(ctx))
	_, err = s.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)
}
