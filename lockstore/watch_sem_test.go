package lockstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/memory"
	"github.com/lockgateway/lockgateway/lockstore/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testSemHub: the hub reports permits granted, extended, released and
// expired, each soon after it happened.
func testSemHub(t *testing.T, store lockstore.Semaphores) {
	ctx := context.Background()
	hub := lockstore.NewSemHub(store, time.Second)
	w := hub.Watch("s")
	defer w.Close()
	next := func() lockstore.Update[lockstore.SemState] {
		t.Helper()
		for {
			select {
			case <-w.Ready():
				if u, ok := w.Latest(); ok {
					require.NoError(t, u.Err)
					return u
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no update")
			}
		}
	}
	u := next()
	require.False(t, u.State.Held())
	assert.Equal(t, "free", u.State.Tag())

	a, b := lockstore.NewToken(), lockstore.NewToken()
	at := time.Now()
	pa, err := store.SemAcquire(ctx, "s", lockstore.PermitRequest{Token: a, TTL: time.Minute, Limit: 2})
	require.NoError(t, err)
	u = next()
	require.Len(t, u.State.Sem.Holders, 1)
	assert.Equal(t, pa.Fence, u.State.Sem.Holders[0].Fence)
	assert.Less(t, time.Since(at), time.Second)
	tag1 := u.State.Tag()

	at = time.Now()
	_, err = store.SemAcquire(ctx, "s", lockstore.PermitRequest{Token: b, TTL: 300 * time.Millisecond, Limit: 2})
	require.NoError(t, err)
	u = next()
	require.Len(t, u.State.Sem.Holders, 2)
	assert.NotEqual(t, tag1, u.State.Tag())
	assert.Less(t, time.Since(at), time.Second)

	u = next() // b expires
	require.Len(t, u.State.Sem.Holders, 1, "expired")
	assert.Equal(t, tag1, u.State.Tag())

	at = time.Now()
	_, err = store.SemExtend(ctx, "s", a, 2*time.Minute)
	require.NoError(t, err)
	u = next()
	assert.Greater(t, time.Until(u.State.Sem.Holders[0].ExpiresAt), time.Minute)
	assert.Equal(t, tag1, u.State.Tag(), "an extend keeps the tag")
	assert.Less(t, time.Since(at), time.Second)

	at = time.Now()
	require.NoError(t, store.SemRelease(ctx, "s", a))
	u = next()
	assert.False(t, u.State.Held())
	assert.Less(t, time.Since(at), time.Second)
}

func TestSemHubMemory(t *testing.T) { testSemHub(t, memory.New()) }

func TestSemHubRedis(t *testing.T) { testSemHub(t, backendtest.NewRedis(t, redistest.Start(t))) }

func TestSemHubRedlock(t *testing.T) {
	testSemHub(t, backendtest.OpenRedlock(t, backendtest.URLs(backendtest.StartNodes(t, 3)), redlock.Options{NodeTimeout: 500 * time.Millisecond}))
}

// skewPermits sets every permit of semaphore key on srv to expire after
// the node's clock passes now+after (lua/sem_common.lua's layout).
func skewPermits(ctx context.Context, srv *redistest.Server, key string, after time.Duration) error {
	const script = `
local t = redis.call('TIME')
local exp = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1]))
for _, slot in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  local v = redis.call('HGET', KEYS[1], slot)
  if v then
    redis.call('HSET', KEYS[1], slot, exp .. string.sub(v, string.find(v, ':', 1, true), -1))
    redis.call('ZADD', KEYS[2], exp, slot)
  end
end
return 0`
	tag := "lockgw:{sem#" + key + "}:"
	return srv.Client().Eval(ctx, script, []string{tag + "permits", tag + "expiry"}, after.Milliseconds()).Err()
}

// As TestLockHubRedlockNodesExpireApart for a permit: its nodes let it go
// 50 ms apart (more than the 32 ms drift allowance of its 3 s lease), and
// the hub reports its expiry, never a change of expiry between (a
// watcher's "extended").
func TestSemHubRedlockNodesExpireApart(t *testing.T) {
	t.Parallel()
	srvs := backendtest.StartNodes(t, 5)
	store := backendtest.OpenRedlock(t, backendtest.URLs(srvs), redlock.Options{NodeTimeout: backendtest.Roomy})
	ctx := backendtest.Ctx(t)
	for round := range 3 {
		key := fmt.Sprintf("apart-%d", round)
		token := lockstore.NewToken()
		req := lockstore.PermitRequest{Token: token, TTL: 3 * time.Second, Limit: 2}
		p, err := store.SemAcquire(ctx, key, req)
		for try := 0; try < 5 && errors.Is(err, lockstore.ErrUnavailable); try++ {
			p, err = store.SemAcquire(ctx, key, req) // with its token, as a client would
		}
		require.NoError(t, err)
		for i, srv := range srvs {
			require.NoError(t, skewPermits(ctx, srv, key, time.Duration(2000+50*i)*time.Millisecond))
		}
		hub := lockstore.NewSemHub(store, time.Second)
		w := hub.Watch(key)
		next := func() lockstore.Update[lockstore.SemState] {
			t.Helper()
			select {
			case <-w.Ready():
			case <-time.After(5 * time.Second):
				t.Fatal("no update")
			}
			u, ok := w.Latest()
			require.True(t, ok)
			require.NoError(t, u.Err)
			return u
		}
		u := next()
		require.Len(t, u.State.Sem.Holders, 1)
		require.Equal(t, p.Fence, u.State.Sem.Holders[0].Fence)
		left := time.Until(u.State.Sem.Holders[0].ExpiresAt)
		require.Less(t, left, 2100*time.Millisecond, "the skew took")
		u = next()
		assert.False(t, u.State.Held(), "round %d: a change of expiry nobody made: %+v", round, u.State)
		w.Close()
	}
}
