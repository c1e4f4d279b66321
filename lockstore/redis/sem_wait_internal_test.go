package redis

import (
	"context"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRedisSemWaitWithoutReplicas: on a Redis with no replica, WAIT 1 is
// never reached, so every permit is answered 503, and is taken back as a
// lock's grant is: the key stays free (before, the first permit stayed
// until its TTL and every later acquire met semaphore-full). A caller
// whose deadline is shorter than the backend timeout gets its 503 by that
// deadline, and the take-back still runs after it.
func TestRedisSemWaitWithoutReplicas(t *testing.T) {
	srv := redistest.Start(t)
	s, err := Open(srv.URL(), Options{Timeout: 2 * time.Second, WaitReplicas: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	bg := context.Background()
	for range 3 {
		ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
		start := time.Now()
		_, err := s.SemAcquire(ctx, "lonely", lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Minute, Limit: 1, Owner: "w"})
		cancel()
		require.ErrorIs(t, err, lockstore.ErrReplicas)
		assert.Less(t, time.Since(start), time.Second, "WAIT is bounded by the caller's deadline")
	}
	_, err = s.SemInspect(bg, "lonely")
	assert.ErrorIs(t, err, lockstore.ErrNotHeld, "no permit left behind")
	keys, err := srv.Client().Keys(bg, "lockgw:{sem#lonely}:[pe]*").Result()
	require.NoError(t, err)
	assert.Empty(t, keys, "neither the permits nor their expiry set")
}

// TestSemUnwaitKeepsTwin stages what a permit whose WAIT failed can meet
// when it takes itself back: the same token renewed or extended it since
// (a twin request, or a retry after the 503), maybe answered 200, in the
// grant's own millisecond (one MULTI runs on one clock reading) with its
// TTL. The take-back must leave it; it deletes only the permit exactly as
// the grant left it, and a later grant of the token is not that one.
func TestSemUnwaitKeepsTwin(t *testing.T) {
	srv := redistest.Start(t)
	s := openInternal(t, srv)
	ctx := context.Background()
	c := srv.Client()
	token := lockstore.NewToken()
	a := script.SemArgs{Digest: script.DigestHex(token), Ttl: time.Minute, Owner: "o", Limit: 2, Publish: script.PublishAll}
	require.NoError(t, script.SemAcquireScript.Load(ctx, c).Err())
	require.NoError(t, script.SemExtendScript.Load(ctx, c).Err())
	held := func(key string) int64 { return c.ZCard(ctx, script.SemExpiryKey(key)).Val() }

	for _, twin := range []string{"renewal", "extend"} {
		t.Run(twin, func(t *testing.T) {
			key := "twin-" + twin
			keys := []string{script.SemPermitsKey(key), script.SemExpiryKey(key), script.SemFenceKey(key), script.SemQueueKey(key), script.SemAliveKey(key)}
			args := []any{a.Digest, a.Ttl.Milliseconds(), a.Owner, a.Limit, 0, "", 0,
				script.FenceMargin.Milliseconds(), "", 0, script.SemChannel(key), script.PublishAll, farDeadline(t, c)}
			var grant, again *redis.Cmd
			_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
				grant = script.SemAcquireScript.EvalSha(ctx, p, keys, args...)
				if twin == "renewal" {
					again = script.SemAcquireScript.EvalSha(ctx, p, keys, args...)
				} else {
					again = script.SemExtendScript.EvalSha(ctx, p, []string{keys[0], keys[1], script.SemForcedKey(key)}, a.Digest, a.Ttl.Milliseconds(), "", script.PublishAll)
				}
				return nil
			})
			require.NoError(t, err)
			g, err := grant.Slice()
			require.NoError(t, err)
			require.Equal(t, int64(script.SemNew), g[0])
			r, err := again.Slice()
			require.NoError(t, err)
			require.NotEqual(t, g[1], r[1], "the twin moved the permit's expiry")
			slot, _ := g[2].(int64)
			s.semUnwait(ctx, key, int(slot), g[1].(string))
			assert.EqualValues(t, 1, held(key), "the take-back left the twin's permit")
		})
	}

	r, err := script.SemAcquire(ctx, rawGrants(c), "regranted", a)
	require.NoError(t, err)
	require.NoError(t, s.SemRelease(ctx, "regranted", token))
	_, err = script.SemAcquire(ctx, rawGrants(c), "regranted", a)
	require.NoError(t, err)
	s.semUnwait(ctx, "regranted", r.Slot, r.Value.Raw)
	assert.EqualValues(t, 1, held("regranted"), "a later grant is not this one")

	r, err = script.SemAcquire(ctx, rawGrants(c), "untouched", a)
	require.NoError(t, err)
	require.Equal(t, script.SemNew, r.Code)
	s.semUnwait(ctx, "untouched", r.Slot, r.Value.Raw)
	assert.Zero(t, held("untouched"), "the grant as it left it is taken back")
}
