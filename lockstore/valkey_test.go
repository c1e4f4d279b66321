package lockstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/lockstoretest"
)

// The redis and redlock backends on Valkey, the Redis fork most Linux
// distributions now ship (docs/backends.md names the versions tested). Every
// store here is opened as the gateway opens its own (OpenRedis,
// OpenRedlock), so the clients carry the gateway's options; after the
// suites, each Valkey server's INFO errorstats must be empty: Valkey refused
// no command of ours, the connection handshake included. The runs are kept
// lean and parallel: the Redis tests cover the rest of each backend.

// openValkey opens the redis backend on url in mode, closed when the test
// ends.
func openValkey(t testing.TB, url string, mode lockstore.RedisMode, replicas int) *lockstore.Redis {
	t.Helper()
	s, err := lockstore.OpenRedis(url, lockstore.RedisOptions{Mode: mode, Timeout: time.Second, WaitReplicas: replicas})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// requireNoErrors fails when a server answered any error since it started,
// naming each kind and count. NOSCRIPT is not a refusal: it is how
// go-redis's Script.Run learns that a script is not cached yet (EVALSHA
// first, then EVAL with the script's text), once per script and server,
// or a few times when first calls race; Redis answers it the same way.
func requireNoErrors(t *testing.T, srvs ...*redistest.Server) {
	t.Helper()
	for _, srv := range srvs {
		stats, err := srv.ErrorStats(context.Background())
		require.NoError(t, err)
		if n := stats["NOSCRIPT"]; n > 0 {
			t.Logf("%s: %d NOSCRIPT (first runs of scripts, each followed by EVAL)", srv.Addr(), n)
			delete(stats, "NOSCRIPT")
		}
		assert.Empty(t, stats, "%s answered errors (INFO errorstats): a command of ours was refused", srv.Addr())
	}
}

func logVersion(t *testing.T, srv *redistest.Server) {
	t.Helper()
	v, err := srv.Version(context.Background())
	require.NoError(t, err)
	t.Logf("%s at %s", v, srv.Addr())
}

// TestValkey: locks, semaphores and quotas on one valkey-server, the way
// TestRedisConformance, TestRedisSemaphores and TestRedisQuota run them on
// redis-server.
func TestValkey(t *testing.T) {
	t.Parallel()
	srv := redistest.StartValkey(t)
	logVersion(t, srv)
	s := openValkey(t, srv.URL(), lockstore.RedisSingle, 0)
	t.Run("Suites", func(t *testing.T) { // at once: they use keys of their own; the group ends when all three have
		t.Run("Conformance", func(t *testing.T) {
			t.Parallel()
			lockstoretest.Run(t, func(*testing.T) lockstore.Store { return s })
		})
		t.Run("Semaphores", func(t *testing.T) {
			t.Parallel()
			lockstoretest.RunSemaphores(t, func(*testing.T) lockstore.Semaphores { return s }, true)
		})
		t.Run("Quota", func(t *testing.T) { // two clients of one Valkey, as two gateways would be
			t.Parallel()
			lockstoretest.RunQuota(t, func(t *testing.T) lockstore.Store { return openValkey(t, srv.URL(), lockstore.RedisSingle, 0) })
		})
	})
	requireNoErrors(t, srv)
}

// TestValkeySentinel: the conformance suite through Valkey's Sentinel (a
// master, a replica and three sentinels, all valkey-server), every grant
// acknowledged by the replica (WAIT).
func TestValkeySentinel(t *testing.T) {
	t.Parallel()
	st := redistest.StartValkeySentinel(t)
	s := openValkey(t, st.URL(), lockstore.RedisSentinel, 1)
	lockstoretest.Run(t, func(*testing.T) lockstore.Store { return s })
	// /readyz asks the sentinels too, through clients of their own.
	assert.Equal(t, st.Master().Addr(), s.Topology(context.Background()).Master)
	requireNoErrors(t, append(st.Nodes[:], st.Watchers[:]...)...)
}

// TestValkeyCluster: the conformance suite on a Valkey cluster of three
// masters.
func TestValkeyCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartValkeyCluster(t, 3)
	s := openValkey(t, c.URL(), lockstore.RedisCluster, 0)
	lockstoretest.Run(t, func(*testing.T) lockstore.Store { return s })
	assert.Equal(t, 3, s.Topology(context.Background()).ShardsUp)
	requireNoErrors(t, c.Masters...)
}

// TestRedlockMixedRedisAndValkey: a Redlock of three Valkey and two Redis
// masters grants, extends and releases as one of five Redis masters does:
// no quorum can form without a Valkey node.
func TestRedlockMixedRedisAndValkey(t *testing.T) {
	t.Parallel()
	valkey := []*redistest.Server{redistest.StartValkey(t), redistest.StartValkey(t), redistest.StartValkey(t)}
	redis := startNodes(t, 2)
	nodes := []*redistest.Server{valkey[0], redis[0], valkey[1], redis[1], valkey[2]}
	for _, n := range nodes {
		logVersion(t, n)
	}
	s := openRedlock(t, urlsOf(nodes), lockstore.RedlockOptions{NodeTimeout: roomy})
	lockstoretest.Run(t, func(*testing.T) lockstore.Store { return s })
	requireNoErrors(t, valkey...)
}
