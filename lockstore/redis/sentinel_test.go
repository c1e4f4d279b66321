package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/lockstoretest"
	"github.com/lockgateway/lockgateway/lockstore/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func openSentinel(t testing.TB, st *redistest.Sentinels, replicas int) *redis.Store {
	t.Helper()
	s, err := redis.Open(st.URL(), redis.Options{Mode: redis.Sentinel, Timeout: time.Second, WaitReplicas: replicas})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestSentinel runs everything that needs a Sentinel set-up on one (a
// master, a replica, three sentinels), in order: the failover last, as it
// leaves the set-up changed.
func TestSentinel(t *testing.T) {
	st := redistest.StartSentinel(t)
	waiting := openSentinel(t, st, 1)
	plain := openSentinel(t, st, 0)

	// Both ways through the same master: answering at once, and only
	// after the replica acknowledged (every grant, renewal and extend of
	// the suite waits for it).
	t.Run("Conformance", func(t *testing.T) {
		t.Run("NoWait", func(t *testing.T) { lockstoretest.Run(t, func(*testing.T) lockstore.Store { return plain }) })
		t.Run("WaitReplicas1", func(t *testing.T) { lockstoretest.Run(t, func(*testing.T) lockstore.Store { return waiting }) })
		t.Run("Waiting", func(t *testing.T) {
			lockstoretest.RunWait(t, func(*testing.T) lockstore.Store { return waiting }, true)
		})
		t.Run("Quota", func(t *testing.T) {
			lockstoretest.RunQuota(t, func(t *testing.T) lockstore.Store { return openSentinel(t, st, 1) })
		})
		t.Run("SemaphoresWaitReplicas1", func(t *testing.T) {
			lockstoretest.RunSemaphores(t, func(t *testing.T) lockstore.Semaphores { return openSentinel(t, st, 1) }, true)
		})
	})

	t.Run("ReplicaPaused", func(t *testing.T) { testReplicaPaused(t, st, waiting) })
	t.Run("FailoverKeepsAcknowledgedLease", func(t *testing.T) { testFailoverKeepsLease(t, st, waiting) })
}

// testReplicaPaused: with the replica stopped, WAIT cannot be reached. A new
// grant is answered 503 and taken back; a renewal and an extend of a lease
// the client held before are answered 503 and leave it held, never
// deleted or shortened.
func testReplicaPaused(t *testing.T, st *redistest.Sentinels, s *redis.Store) {
	ctx := context.Background()
	held, err := s.Acquire(ctx, "paused/held", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)

	replica := st.Replica()
	replica.Pause()
	defer replica.Resume()
	master := st.Master().Client()

	start := time.Now()
	_, err = s.Acquire(ctx, "paused/new", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	took := time.Since(start)
	require.ErrorIs(t, err, lockstore.ErrUnavailable)
	require.ErrorIs(t, err, lockstore.ErrReplicas)
	assert.Contains(t, err.Error(), "0 of 1 replicas")
	assert.Less(t, took, 2*time.Second, "WAIT is bounded by the backend timeout (1s)")
	n, err := master.Exists(ctx, "lockgw:{paused/new}:lock").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the unacknowledged grant was taken back")

	// The same with a waiting acquire, whose deadline is far off: WAIT is
	// still bounded by the backend timeout.
	_, err = s.Acquire(ctx, "paused/waiter", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute, Wait: 10 * time.Second})
	require.ErrorIs(t, err, lockstore.ErrReplicas)
	n, err = master.Exists(ctx, "lockgw:{paused/waiter}:lock").Result()
	require.NoError(t, err)
	assert.Zero(t, n)

	_, err = s.Acquire(ctx, "paused/held", lockstore.AcquireRequest{Token: held.Token, TTL: 30 * time.Second})
	require.ErrorIs(t, err, lockstore.ErrReplicas, "a renewal waits too")
	_, err = s.Extend(ctx, "paused/held", held.Token, 20*time.Second)
	require.ErrorIs(t, err, lockstore.ErrReplicas, "an extend waits too")
	pttl, err := master.PTTL(ctx, "lockgw:{paused/held}:lock").Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, 10*time.Second, "the lease the client held is still there")
	_, err = s.Acquire(ctx, "paused/held", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.ErrorIs(t, err, lockstore.ErrHeld, "and still keeps others out")

	replica.Resume()
	// Once the replica is back, the same token gets the lock: the 503
	// left nothing in its way.
	require.Eventually(t, func() bool {
		_, err := s.Acquire(ctx, "paused/new", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
		return err == nil
	}, 10*time.Second, 50*time.Millisecond)
	_, err = s.Extend(ctx, "paused/held", held.Token, time.Minute)
	require.NoError(t, err)
}

// testFailoverKeepsLease: a lease granted with WAIT 1 is on the replica the
// sentinels promote when the master dies, so after the failover another
// token is refused, the holder can release it, and fences go on rising.
func testFailoverKeepsLease(t *testing.T, st *redistest.Sentinels, s *redis.Store) {
	ctx := context.Background()
	var leases []lockstore.Lease
	for i := range 20 {
		l, err := s.Acquire(ctx, "failover/"+string(rune('a'+i)), lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
		require.NoError(t, err)
		leases = append(leases, l)
	}
	killed, took := st.Failover()
	t.Logf("Sentinel promoted the replica %v after the master was killed", took.Round(time.Millisecond))

	// The client finds the new master by itself; the first calls may still
	// meet the dead one.
	var err error
	require.Eventually(t, func() bool {
		_, err = s.Inspect(ctx, leases[0].Key)
		return err == nil
	}, 15*time.Second, 20*time.Millisecond, "the store answers again after the failover: %v", err)
	for _, l := range leases {
		got, err := s.Inspect(ctx, l.Key)
		require.NoError(t, err, "the acknowledged lease %s survived the failover", l.Key)
		assert.Equal(t, l.Fence, got.Fence)
		_, err = s.Acquire(ctx, l.Key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
		require.ErrorIs(t, err, lockstore.ErrHeld, "another token is refused %s", l.Key)
	}
	// Releases need no replica; new grants need one to acknowledge.
	require.NoError(t, s.Release(ctx, leases[0].Key, leases[0].Token))
	_, err = s.Acquire(ctx, leases[0].Key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.ErrorIs(t, err, lockstore.ErrReplicas, "the new master has no replica yet")

	st.Rejoin(killed)
	next, err := s.Acquire(ctx, leases[0].Key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)
	assert.Greater(t, next.Fence, leases[0].Fence, "fences go on rising across the failover")
	for _, l := range leases[1:] {
		require.NoError(t, s.Release(ctx, l.Key, l.Token))
	}
	info, err := st.Master().Client().Info(ctx, "replication").Result()
	require.NoError(t, err)
	assert.True(t, strings.Contains(info, "connected_slaves:1"), "the killed master is the new replica")
}

// TestRedisWaitWithoutReplicas: on a Redis with no replica, WAIT 1 is never
// reached: every grant is answered 503 and nothing is left behind, so the
// key stays free.
func TestRedisWaitWithoutReplicas(t *testing.T) {
	srv := redistest.Start(t)
	// 500 ms, not less: the take-back runs under the same timeout, and one
	// that a loaded machine ran out of time for leaves the grant to its TTL
	// (documented at unwait), which this test would see as a held key.
	s, err := redis.Open(srv.URL(), redis.Options{Timeout: 500 * time.Millisecond, WaitReplicas: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	for range 3 {
		_, err := s.Acquire(ctx, "lonely", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute, Owner: "w"})
		require.ErrorIs(t, err, lockstore.ErrReplicas)
	}
	keys, err := srv.Client().Keys(ctx, "lockgw:{lonely}:lock").Result()
	require.NoError(t, err)
	assert.Empty(t, keys)
	_, err = s.Inspect(ctx, "lonely")
	assert.ErrorIs(t, err, lockstore.ErrNotHeld)
	// /readyz asks Ping: a Redis that cannot grant is not ready.
	assert.ErrorIs(t, s.Ping(ctx), lockstore.ErrReplicas)
}

// TestRedisWaitTakeBackAfterDeadline: a caller whose own deadline is
// shorter than the backend timeout gets its 503 by that deadline, and the
// take-back still runs after it; a grant counted against a user's quota
// leaves no count behind either, so the user's cap is not eaten by grants
// nobody holds.
func TestRedisWaitTakeBackAfterDeadline(t *testing.T) {
	srv := redistest.Start(t)
	s, err := redis.Open(srv.URL(), redis.Options{Timeout: 2 * time.Second, WaitReplicas: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	c := srv.Client()

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Acquire(ctx, "short", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute, Quota: lockstore.Quota{User: "ann", Max: 1}})
	took := time.Since(start)
	require.ErrorIs(t, err, lockstore.ErrReplicas)
	assert.Less(t, took, time.Second, "WAIT is bounded by the caller's deadline, not only the backend timeout")
	bg := context.Background()
	assert.Zero(t, c.Exists(bg, "lockgw:{short}:lock").Val(), "taken back after the caller's deadline")
	members, err := c.ZRange(bg, "lockgw:{quota:ann}:locks", 0, -1).Result()
	require.NoError(t, err)
	assert.Empty(t, members, "and uncounted")
}

func TestOpenRedisRefusesWaitOnCluster(t *testing.T) {
	_, err := redis.Open("redis://127.0.0.1:7000", redis.Options{Mode: redis.Cluster, Timeout: time.Second, WaitReplicas: 1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "single Redis or Sentinel")
}

func TestOpenRedisRefusesReplicaOnly(t *testing.T) {
	_, err := redis.Open("redis://127.0.0.1:26400?master_name=m&replica_only=true", redis.Options{Mode: redis.Sentinel, Timeout: time.Second})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "replica_only")
}
