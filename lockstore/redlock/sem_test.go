package redlock_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/redlock"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRedlockSemaphoreNeedsOneSlotOnAMajority is the counterexample to
// "a permit needs a majority of nodes, each granting while its count is
// below the limit" (docs/safety.md, "Semaphores"): with 5 nodes and limit
// 2, A holds on nodes 1-3 and B on nodes 3-5, so every node but node 3
// has a place left, and nodes 1, 2 and 4 would grant C a majority: three
// holders. With slots, A holds slot 1 and B slot 2; slot 1 is free only on
// 4 and 5, slot 2 only on 1 and 2, so no slot has a majority: C is refused.
func TestRedlockSemaphoreNeedsOneSlotOnAMajority(t *testing.T) {
	t.Parallel()
	srvs := backendtest.StartNodes(t, 5)
	s := backendtest.OpenRedlock(t, backendtest.URLs(srvs), redlock.Options{NodeTimeout: backendtest.Roomy})
	const key = "sem/counterexample"
	plant := func(nodes []int, slot int, token string, fence int64) {
		d := sha256.Sum256([]byte(token))
		for _, i := range nodes {
			c := srvs[i-1].Client()
			now, err := c.Time(context.Background()).Result()
			require.NoError(t, err)
			v := fmt.Sprintf("%d:%s:~planted:%d+060000:%s", now.UnixMilli()+60000, hex.EncodeToString(d[:]), fence, token[:4])
			hash, zset := "lockgw:{sem#"+key+"}:permits", "lockgw:{sem#"+key+"}:expiry"
			require.NoError(t, c.HSet(context.Background(), hash, "limit", 2, fmt.Sprint(slot), v, "t:"+hex.EncodeToString(d[:]), slot).Err())
			// A minute: a loaded machine stalled this test past a 10 s plant.
			require.NoError(t, c.ZAdd(context.Background(), zset, redis.Z{Score: float64(now.UnixMilli() + 60000), Member: fmt.Sprint(slot)}).Err())
			require.NoError(t, c.PExpire(context.Background(), hash, time.Minute).Err())
			require.NoError(t, c.PExpire(context.Background(), zset, time.Minute).Err())
		}
	}
	a, b := lockstore.NewToken(), lockstore.NewToken()
	plant([]int{1, 2, 3}, 1, a, 101) // confirmed ("+0"), each fence ≡ its slot (mod 2)
	plant([]int{3, 4, 5}, 2, b, 200)

	st, err := s.SemInspect(backendtest.Ctx(t), key)
	require.NoError(t, err)
	assert.Len(t, st.Holders, 2, "A and B each hold a slot on a majority")
	assert.Equal(t, 2, st.Limit)

	for range 5 {
		_, err := s.SemAcquire(backendtest.Ctx(t), key, lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Second, Limit: 2})
		require.ErrorIs(t, err, lockstore.ErrSemaphoreFull, "a third holder")
	}
	// A retry by A re-grants A's slot.
	p, err := s.SemAcquire(backendtest.Ctx(t), key, lockstore.PermitRequest{Token: a, TTL: time.Second, Limit: 2})
	require.NoError(t, err)
	assert.True(t, p.Renewed)
	assert.Equal(t, int64(101), p.Fence)
	// Once B releases, slot 2 is free everywhere.
	require.NoError(t, s.SemRelease(backendtest.Ctx(t), key, b))
	c, err := s.SemAcquire(backendtest.Ctx(t), key, lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Second, Limit: 2})
	require.NoError(t, err)
	assert.Greater(t, c.Fence, int64(200))
}

// TestRedlockSemaphoreQuorum: with 2 of 5 nodes down permits are still
// granted, released and inspected; with 3 down none is (ErrUnavailable,
// a QuorumError), and the limit still holds for the permits granted before.
func TestRedlockSemaphoreQuorum(t *testing.T) {
	t.Parallel()
	srvs := backendtest.StartNodes(t, 5)
	s := backendtest.OpenRedlock(t, backendtest.URLs(srvs), redlock.Options{NodeTimeout: backendtest.Roomy})
	ready(t, s)
	const key = "sem/quorum"
	req := func() lockstore.PermitRequest {
		return lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: 10 * time.Second, Limit: 2}
	}
	a, err := s.SemAcquire(backendtest.Ctx(t), key, req())
	require.NoError(t, err)
	srvs[0].Kill()
	srvs[1].Kill()
	b, err := s.SemAcquire(backendtest.Ctx(t), key, req())
	require.NoError(t, err, "a majority is still up")
	_, err = s.SemAcquire(backendtest.Ctx(t), key, req())
	require.ErrorIs(t, err, lockstore.ErrSemaphoreFull)
	st, err := s.SemInspect(backendtest.Ctx(t), key)
	require.NoError(t, err)
	assert.Len(t, st.Holders, 2)
	require.NoError(t, s.SemRelease(backendtest.Ctx(t), key, b.Token))

	srvs[2].Kill()
	_, err = s.SemAcquire(backendtest.Ctx(t), key, req())
	require.ErrorIs(t, err, lockstore.ErrUnavailable)
	var q *lockstore.QuorumError
	assert.ErrorAs(t, err, &q)
	require.ErrorIs(t, s.SemRelease(backendtest.Ctx(t), key, a.Token), lockstore.ErrUnavailable)
}

// TestRedlockSemaphoreTwins: one token's acquire sent twice at once
// through two gateways (a client retrying while its first request is in
// flight) ends with one permit: at least one twin is granted, and the
// semaphore shows one holder.
func TestRedlockSemaphoreTwins(t *testing.T) {
	t.Parallel()
	urls := backendtest.URLs(backendtest.StartNodes(t, 5))
	a := backendtest.OpenRedlock(t, urls, redlock.Options{NodeTimeout: backendtest.Roomy})
	b := backendtest.OpenRedlock(t, urls, redlock.Options{NodeTimeout: backendtest.Roomy})
	for i := range 20 {
		key := fmt.Sprintf("sem/twins-%d", i)
		req := lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: 10 * time.Second, Limit: 5}
		var ps [2]lockstore.Permit
		var errs [2]error
		var wg sync.WaitGroup
		for j, s := range []*redlock.Store{a, b} {
			wg.Go(func() { ps[j], errs[j] = s.SemAcquire(backendtest.Ctx(t), key, req) })
		}
		wg.Wait()
		if errs[0] != nil && errs[1] != nil {
			// Both unsettled (a slow machine): the client retries with
			// its token, which must settle it; as a client would, after a
			// pause and more than once (one retry at once met nodes still
			// marked down by the same load: "3 of 5 Redlock nodes did not
			// answer" in make test).
			require.ErrorIs(t, errs[0], lockstore.ErrUnavailable)
			_, errs[0] = retryUnavailable(func() (err error) {
				ps[0], err = a.SemAcquire(backendtest.Ctx(t), key, req)
				return err
			})
		}
		require.True(t, errs[0] == nil || errs[1] == nil, "neither twin got the permit: %v, %v", errs[0], errs[1])
		if errs[0] == nil && errs[1] == nil && ps[0].Fence != ps[1].Fence {
			// As for a lock's twins: rounds that overlap may each confirm
			// a fence (one a renewal's kept fence, one a new grant's);
			// both are the one holder's.
			t.Logf("twins %d: both granted, fences %d and %d", i, ps[0].Fence, ps[1].Fence)
		}
		st, err := a.SemInspect(backendtest.Ctx(t), key)
		require.NoError(t, err)
		assert.Len(t, st.Holders, 1, "one token, one permit")
	}
}
