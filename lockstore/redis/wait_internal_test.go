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

// TestUnwaitKeepsRenewedLease stages what a grant whose WAIT failed can
// meet when it takes itself back: the same token renewed the lease in the
// meantime (a twin request, or a retry after the 503 while the take-back
// was still on the wire), and that renewal may have been answered 200. The
// take-back must leave it; it deletes only the lease exactly as the grant
// left it.
func TestUnwaitKeepsRenewedLease(t *testing.T) {
	srv := redistest.Start(t)
	s := openInternal(t, srv)
	ctx := context.Background()
	c := srv.Client()

	token := lockstore.NewToken()
	a := script.AcquireArgs{Digest: script.DigestHex(token), Ttl: time.Minute, Owner: "o"}
	grant := func(key string) (string, int64) {
		r, err := script.Acquire(ctx, s.clocked(s.client), key, a)
		require.NoError(t, err)
		v, err := c.Get(ctx, script.LockKey(key)).Result()
		require.NoError(t, err)
		at, err := c.Do(ctx, "PEXPIRETIME", script.LockKey(key)).Int64()
		require.NoError(t, err)
		require.Equal(t, script.AcquireNew, r.Code)
		return v, at
	}

	v, at := grant("renewed")
	time.Sleep(5 * time.Millisecond)
	r, err := script.Acquire(ctx, s.clocked(s.client), "renewed", a) // the same token, the same TTL: the same value
	require.NoError(t, err)
	require.Equal(t, script.AcquireRenewed, r.Code)
	s.unwait(ctx, "renewed", a, v, at)
	got, err := c.Get(ctx, script.LockKey("renewed")).Result()
	require.NoError(t, err, "the renewed lease is still there")
	assert.Equal(t, v, got)

	v, at = grant("extended")
	time.Sleep(5 * time.Millisecond)
	_, err = script.Extend(ctx, s.client, "extended", script.ExtendArgs{Digest: a.Digest, TTL: time.Minute})
	require.NoError(t, err)
	s.unwait(ctx, "extended", a, v, at)
	assert.EqualValues(t, 1, c.Exists(ctx, script.LockKey("extended")).Val(), "the extended lease is still there")

	v, at = grant("regranted")
	require.NoError(t, s.Release(ctx, "regranted", token))
	v2, _ := grant("regranted") // the same token again: a new fence, so a new value
	require.NotEqual(t, v, v2)
	s.unwait(ctx, "regranted", a, v, at)
	assert.EqualValues(t, 1, c.Exists(ctx, script.LockKey("regranted")).Val(), "a later grant is not this one")

	v, at = grant("untouched")
	s.unwait(ctx, "untouched", a, v, at)
	assert.Zero(t, c.Exists(ctx, script.LockKey("untouched")).Val(), "the grant as it left it is taken back")
	_, err = s.Acquire(ctx, "untouched", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	assert.NoError(t, err, "and the key is free")
}

// TestUnwaitKeepsTwinInTheSameMillisecond: a twin request of the same token
// and TTL that renews the grant within its millisecond (here: in the same
// MULTI, which Redis runs on one clock reading) used to leave value and
// expiry exactly as the grant left them, so the grant's take-back deleted a
// lease the twin may have been told it holds. The renewal, and an extend
// alike, now always move the expiry.
func TestUnwaitKeepsTwinInTheSameMillisecond(t *testing.T) {
	srv := redistest.Start(t)
	s := openInternal(t, srv)
	ctx := context.Background()
	c := srv.Client()
	a := script.AcquireArgs{Digest: script.DigestHex(lockstore.NewToken()), Ttl: time.Minute, Owner: "o"}
	require.NoError(t, script.AcquireScript.Load(ctx, c).Err())
	require.NoError(t, script.ExtendScript.Load(ctx, c).Err())

	for _, twin := range []string{"renewal", "extend"} {
		t.Run(twin, func(t *testing.T) {
			key := "twin-" + twin
			keys, args := a.Call(key)
			args = append(args, farDeadline(t, c)) // rule D, as the store sends it
			var grant, again *redis.Cmd
			var before, after *redis.Cmd
			_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
				grant = script.AcquireScript.EvalSha(ctx, p, keys, args...)
				before = p.Do(ctx, "PEXPIRETIME", script.LockKey(key))
				if twin == "renewal" {
					again = script.AcquireScript.EvalSha(ctx, p, keys, args...)
				} else {
					again = script.ExtendScript.EvalSha(ctx, p, []string{script.LockKey(key), script.ForcedKey(key)}, a.Digest, a.Ttl.Milliseconds())
				}
				after = p.Do(ctx, "PEXPIRETIME", script.LockKey(key))
				return nil
			})
			require.NoError(t, err)
			require.NoError(t, again.Err())
			g, err := grant.Slice()
			require.NoError(t, err)
			require.Equal(t, int64(script.AcquireNew), g[0])
			value := g[1].(string)
			at, err := before.Int64()
			require.NoError(t, err)
			moved, err := after.Int64()
			require.NoError(t, err)
			assert.Greater(t, moved, at, "the twin moved the expiry")

			s.unwait(ctx, key, a, value, at)
			assert.EqualValues(t, 1, c.Exists(ctx, script.LockKey(key)).Val(), "the take-back left the twin's lease")
		})
	}
}
