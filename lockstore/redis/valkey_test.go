package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/lockstoretest"
	"github.com/lockgateway/lockgateway/lockstore/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
func openValkey(t testing.TB, url string, mode redis.Mode, replicas int) *redis.Store {
	t.Helper()
	s, err := redis.Open(url, redis.Options{Mode: mode, Timeout: time.Second, WaitReplicas: replicas})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestValkey: locks, semaphores and quotas on one valkey-server, the way
// TestRedisConformance, TestRedisSemaphores and TestRedisQuota run them on
// redis-server.
func TestValkey(t *testing.T) {
	t.Parallel()
	srv := redistest.StartValkey(t)
	backendtest.LogVersion(t, srv)
	s := openValkey(t, srv.URL(), redis.Single, 0)
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
			lockstoretest.RunQuota(t, func(t *testing.T) lockstore.Store { return openValkey(t, srv.URL(), redis.Single, 0) })
		})
	})
	backendtest.RequireNoErrors(t, srv)
}

// TestValkeySentinel: the conformance suite through Valkey's Sentinel (a
// master, a replica and three sentinels, all valkey-server), every grant
// acknowledged by the replica (WAIT).
func TestValkeySentinel(t *testing.T) {
	t.Parallel()
	st := redistest.StartValkeySentinel(t)
	s := openValkey(t, st.URL(), redis.Sentinel, 1)
	lockstoretest.Run(t, func(*testing.T) lockstore.Store { return s })
	// /readyz asks the sentinels too, through clients of their own.
	assert.Equal(t, st.Master().Addr(), s.Topology(context.Background()).Master)
	backendtest.RequireNoErrors(t, append(st.Nodes[:], st.Watchers[:]...)...)
}

// TestValkeyCluster: the conformance suite on a Valkey cluster of three
// masters.
func TestValkeyCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartValkeyCluster(t, 3)
	s := openValkey(t, c.URL(), redis.Cluster, 0)
	lockstoretest.Run(t, func(*testing.T) lockstore.Store { return s })
	assert.Equal(t, 3, s.Topology(context.Background()).ShardsUp)
	backendtest.RequireNoErrors(t, c.Masters...)
}
