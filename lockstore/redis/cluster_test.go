package redis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/script"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/lockstoretest"
	"github.com/lockgateway/lockgateway/lockstore/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRedisCluster runs everything the redis backend does on one 3-master
// Redis Cluster, shared by the subtests (starting one costs a second). Two
// stores on it are two gateways.
func TestRedisCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	a, b := backendtest.NewCluster(t, c), backendtest.NewCluster(t, c)
	t.Run("Conformance", func(t *testing.T) {
		lockstoretest.Run(t, func(t *testing.T) lockstore.Store { return a })
	})
	t.Run("Wait", func(t *testing.T) {
		lockstoretest.RunWait(t, func(t *testing.T) lockstore.Store { return a }, true)
	})
	t.Run("Quota", func(t *testing.T) {
		lockstoretest.RunQuota(t, func(t *testing.T) lockstore.Store { return backendtest.NewCluster(t, c) })
	})
	t.Run("QuotaSteps", func(t *testing.T) { testClusterQuotaSteps(t, c, a, b) })
	t.Run("SlotsAgreeWithRedis", func(t *testing.T) { testClusterSlots(t, c) })
	t.Run("KeysOnEveryMaster", func(t *testing.T) { testClusterSpread(t, c, a) })
	t.Run("ShardedHandoff", func(t *testing.T) { testClusterHandoff(t, c, a, b) })
	t.Run("HandoffAfterSlotMoves", func(t *testing.T) { testClusterSlotMove(t, c, a, b) })
}

// Lock keys of many names spread over every master: the hash tag is the
// key, not a constant that would put every lock on one shard.
func testClusterSpread(t *testing.T, c *redistest.Cluster, s *redis.Store) {
	ctx := context.Background()
	for i := range 60 {
		_, err := s.Acquire(ctx, fmt.Sprintf("spread/%d", i), lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
		require.NoError(t, err)
	}
	for _, m := range c.Masters {
		keys, err := m.Client().Keys(ctx, "lockgw:{spread/*}:lock").Result()
		require.NoError(t, err)
		assert.NotEmpty(t, keys, "master %s holds some of the 60 locks", m.Addr())
		t.Logf("master %s: %d of 60 locks", m.Addr(), len(keys))
	}
}

// owner is the master that owns key's slot.
func owner(t *testing.T, c *redistest.Cluster, key string) *redistest.Server {
	t.Helper()
	ctx := context.Background()
	for _, m := range c.Masters {
		// Only the owner answers a key command for the slot without MOVED.
		err := m.Client().Exists(ctx, key).Err()
		if err == nil {
			return m
		}
	}
	t.Fatalf("no master owns %s", key)
	return nil
}

// shardSubscribers is how many connections on m listen to ch by SSUBSCRIBE.
func shardSubscribers(t *testing.T, m *redistest.Server, ch string) int64 {
	t.Helper()
	n, err := m.Client().PubSubShardNumSub(context.Background(), ch).Result()
	require.NoError(t, err)
	return n[ch]
}

// waitForSubscriber waits until one connection on m listens to ch.
func waitForSubscriber(t *testing.T, m *redistest.Server, ch string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for shardSubscribers(t, m, ch) != 1 {
		require.True(t, time.Now().Before(deadline), "no SSUBSCRIBE to %s on %s in 5s", ch, m.Addr())
		time.Sleep(10 * time.Millisecond)
	}
}

// handoff has b wait for key while a holds it, releases it from a, and
// returns how long after the release b was granted. The waiter's own
// retry comes at least 750 ms after its last one (wait.go): a handoff far
// quicker than that was the notification's doing.
func handoff(t *testing.T, a, b *redis.Store, key string, subscribed func()) time.Duration {
	t.Helper()
	holder, err := a.Acquire(context.Background(), key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)
	return handoffFrom(t, a, b, key, holder, subscribed)
}

// A waiter on one gateway is woken by a release on another through sharded
// pub/sub on the key's own shard: SSUBSCRIBE there, SPUBLISH by the script,
// no classic PUBLISH anywhere.
func testClusterHandoff(t *testing.T, c *redistest.Cluster, a, b *redis.Store) {
	ctx := context.Background()
	key := "handoff/sharded"
	ch := "lockgw:{" + key + "}:released"
	m := owner(t, c, "lockgw:{"+key+"}:lock")
	before, err := m.CommandCalls(ctx)
	require.NoError(t, err)
	took := handoff(t, a, b, key, func() { waitForSubscriber(t, m, ch) })
	t.Logf("handoff across gateways took %v", took)
	assert.Less(t, took, 600*time.Millisecond, "the waiter was woken by the release, not by its own retry")
	after, err := m.CommandCalls(ctx)
	require.NoError(t, err)
	assert.Greater(t, after["spublish"], before["spublish"], "the release SPUBLISHed on the key's shard")
	for _, n := range c.Masters {
		calls, err := n.CommandCalls(ctx)
		require.NoError(t, err)
		assert.Zero(t, calls["publish"], "no classic PUBLISH on %s: on a Cluster it reaches every node", n.Addr())
		assert.Zero(t, calls["subscribe"], "no classic SUBSCRIBE on %s", n.Addr())
	}
	assert.Zero(t, shardSubscribers(t, m, ch), "the last waiter's subscription is gone")
}

// A waiter whose key's slot moves to another master while it waits is
// subscribed again there: the old owner ends the subscription when it
// gives the slot up, and the notifier follows the slot.
func testClusterSlotMove(t *testing.T, c *redistest.Cluster, a, b *redis.Store) {
	ctx := context.Background()
	key := "handoff/moving"
	lock := "lockgw:{" + key + "}:lock"
	ch := "lockgw:{" + key + "}:released"
	holder, err := a.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)
	src := owner(t, c, lock)
	var dst *redistest.Server
	for _, m := range c.Masters {
		if m != src {
			dst = m
			break
		}
	}
	type result struct {
		l   lockstore.Lease
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := b.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute, Wait: 20 * time.Second})
		got <- result{l, err, time.Now()}
	}()
	waitForSubscriber(t, src, ch)

	moveSlot(t, c, lock, src, dst)
	waitForSubscriber(t, dst, ch)
	assert.Zero(t, shardSubscribers(t, src, ch), "the old owner dropped the subscription")

	time.Sleep(100 * time.Millisecond)
	released := time.Now()
	require.NoError(t, a.Release(ctx, key, holder.Token))
	r := <-got
	require.NoError(t, r.err)
	assert.Greater(t, r.l.Fence, holder.Fence, "the fence counter moved with the slot")
	t.Logf("handoff after the slot moved took %v", r.at.Sub(released))
}

// moveSlot migrates key's slot, keys and all, from src to dst.
func moveSlot(t *testing.T, c *redistest.Cluster, key string, src, dst *redistest.Server) {
	t.Helper()
	require.NotSame(t, src, dst)
	require.Same(t, src, owner(t, c, key))
	require.NoError(t, c.MoveSlot(key, dst))
}

// On a Cluster a user's count lives on another shard than the lock, and
// is changed in steps of its own (cluster_quota.go): a refused acquire
// gives its place back, a release takes the count out, and what a gateway
// that died after reserving leaves counts only until the lease it reserved
// for would have ended.
func testClusterQuotaSteps(t *testing.T, c *redistest.Cluster, a, b *redis.Store) {
	ctx := context.Background()
	rdb := c.Client()
	user := "steps"
	set := "lockgw:{quota:" + user + "}:locks"
	// A key whose lock lives on another shard than the user's set, so the
	// steps really cross shards.
	var key string
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("steps/%d", i)
		if owner(t, c, "lockgw:{"+k+"}:lock") != owner(t, c, set) {
			key = k
		}
	}
	take := func(s *redis.Store, key string, ttl time.Duration) (lockstore.Lease, error) {
		return s.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: ttl, Quota: lockstore.Quota{User: user, Max: 2}})
	}
	count := func() int64 {
		n, err := rdb.ZCard(ctx, set).Result()
		require.NoError(t, err)
		return n
	}

	_, err := a.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)
	_, err = take(b, key, time.Minute)
	require.ErrorIs(t, err, lockstore.ErrHeld)
	assert.Zero(t, count(), "a refused acquire gave its place back")

	l, err := take(b, key+"/mine", time.Minute)
	require.NoError(t, err)
	members, err := rdb.ZRangeWithScores(ctx, set, 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, members, 1)
	assert.True(t, strings.HasPrefix(members[0].Member.(string), "lockgw:{"+key+"/mine}:lock#"), "the member names the lock: %v", members[0].Member)
	require.NoError(t, a.Release(ctx, l.Key, l.Token), "released through the other gateway")
	assert.Zero(t, count(), "the release took the count out")

	// A gateway that reserved a place and died before taking the lock: the
	// place counts until the lease it reserved would have ended, no longer.
	require.NoError(t, script.QuotaScript.Run(ctx, rdb, []string{set}, "reserve", "lockgw:{"+key+"/died}:lock#x", 500, 2).Err())
	_, err = take(a, key+"/1", time.Minute)
	require.NoError(t, err)
	_, err = take(b, key+"/2", time.Minute)
	var capErr *lockstore.CapError
	require.ErrorAs(t, err, &capErr, "the dead gateway's reservation counts")
	assert.LessOrEqual(t, capErr.Next, 500*time.Millisecond)
	time.Sleep(capErr.Next + 50*time.Millisecond)
	_, err = take(b, key+"/2", time.Minute)
	require.NoError(t, err, "the reservation stopped counting with the lease it was for")
}

// The notifier routes a waiter's subscription by the slot it computes:
// it must be Redis's.
func testClusterSlots(t *testing.T, c *redistest.Cluster) {
	rdb := c.Masters[0].Client()
	ctx := context.Background()
	keys := []string{"", "a", "foo", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{}x"}
	for i := range 200 {
		keys = append(keys, fmt.Sprintf("lockgw:{k/%d-é}:released", i))
	}
	for _, k := range keys {
		want, err := rdb.ClusterKeySlot(ctx, k).Result()
		require.NoError(t, err)
		require.Equal(t, int(want), redis.ClusterSlot(k), "slot of %q", k)
	}
}

// TestRedisClusterFailover kills the master of a held lock's shard in a
// cluster with a replica per master: the replica takes over (after the
// 2 s node timeout), the gateway finds it, the lease is still held (it had
// reached the replica), a waiter subscribes on the new master and gets the
// lock when the holder releases it, with a higher fence.
func TestRedisClusterFailover(t *testing.T) {
	began := time.Now()
	c := redistest.StartClusterReplicas(t, 3, 1)
	t.Logf("cluster up in %v", time.Since(began).Round(time.Millisecond))
	a, b := backendtest.NewCluster(t, c), backendtest.NewCluster(t, c)
	ctx := context.Background()
	key := "failover/held"
	lock := "lockgw:{" + key + "}:lock"
	ch := "lockgw:{" + key + "}:released"
	holder, err := a.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)

	m := -1
	for i, s := range c.Masters {
		if s == owner(t, c, lock) {
			m = i
		}
	}
	// The lease must have reached the replica: replication is
	// asynchronous, and a lease it never saw is lost in the failover
	// (docs/redis-cluster.md), which is not what this test is about.
	replica := c.Replicas[m][0]
	deadline := time.Now().Add(5 * time.Second)
	for {
		master, err := c.Masters[m].Client().Info(ctx, "replication").Result()
		require.NoError(t, err)
		got, err := replica.Client().Info(ctx, "replication").Result()
		require.NoError(t, err)
		if field(master, "master_repl_offset") == field(got, "slave_repl_offset") {
			break
		}
		require.True(t, time.Now().Before(deadline), "the replica did not catch up in 5s")
		time.Sleep(10 * time.Millisecond)
	}

	c.Masters[m].Kill()
	killed := time.Now()
	promoted, err := c.WaitFailover(m, 20*time.Second)
	require.NoError(t, err)
	t.Logf("replica %s promoted %v after the kill", promoted.Addr(), time.Since(killed).Round(time.Millisecond))
	var l lockstore.Lease
	for {
		l, err = a.Inspect(ctx, key)
		if err == nil {
			break
		}
		require.ErrorIs(t, err, lockstore.ErrUnavailable)
		require.Less(t, time.Since(killed), 20*time.Second, "the gateway did not find the new master")
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("served again %v after the kill", time.Since(killed).Round(time.Millisecond))
	assert.Equal(t, holder.Fence, l.Fence, "the lease survived the failover")
	_, err = b.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.ErrorIs(t, err, lockstore.ErrHeld)

	took := handoffFrom(t, a, b, key, holder, func() { waitForSubscriber(t, promoted, ch) })
	t.Logf("handoff on the new master took %v", took)
	assert.Less(t, took, 600*time.Millisecond, "woken by the release on the new master")
}

// handoffFrom is handoff with the lock already held by holder (through a).
func handoffFrom(t *testing.T, a, b *redis.Store, key string, holder lockstore.Lease, subscribed func()) time.Duration {
	t.Helper()
	ctx := context.Background()
	type result struct {
		l   lockstore.Lease
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := b.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute, Wait: 20 * time.Second})
		got <- result{l, err, time.Now()}
	}()
	subscribed()
	// Let the waiter's first attempt pass, so only a notification (or its
	// next retry, ≥ 750 ms away) can wake it.
	time.Sleep(100 * time.Millisecond)
	released := time.Now()
	require.NoError(t, a.Release(ctx, key, holder.Token))
	r := <-got
	require.NoError(t, r.err)
	assert.Greater(t, r.l.Fence, holder.Fence)
	return r.at.Sub(released)
}

func field(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
