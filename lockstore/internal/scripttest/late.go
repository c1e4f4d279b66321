package scripttest

import (
	"context"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// LateRelease stages, on s whose nodes are nodes, the second step of a
// release landing late: its reads were answered, its deletes reach every
// node only after a later request of the same token was answered. Each
// delete must find the lease changed, and leave it. The deletes carry a
// deadline of their own, made when they are sent: this is V2's check (the
// pair as read), not rule D's, which would refuse them anyway had they
// been sent before the later request.
func LateRelease(t *testing.T, s lockstore.Store, token string, nodes []redis.Scripter) {
	ctx := context.Background()
	digest := script.DigestHex(token)
	for _, later := range []struct {
		name   string
		before time.Duration // an extend by this much before the read, if any
		do     func(t *testing.T, key string)
	}{
		{"a new grant", 0, func(t *testing.T, key string) {
			require.NoError(t, s.Release(ctx, key, token))
			_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: time.Minute})
			require.NoError(t, err)
		}},
		{"a renewal", 0, func(t *testing.T, key string) {
			_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: time.Minute})
			require.NoError(t, err)
		}},
		{"a shorter renewal", 0, func(t *testing.T, key string) {
			_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: time.Second})
			require.NoError(t, err)
		}},
		{"an extend", 0, func(t *testing.T, key string) {
			_, err := s.Extend(ctx, key, token, time.Minute)
			require.NoError(t, err)
		}},
		{"a shorter extend", 0, func(t *testing.T, key string) {
			_, err := s.Extend(ctx, key, token, time.Second)
			require.NoError(t, err)
		}},
		// The same short extend once more, or one reusing the recorded
		// length, wrote nothing on Redlock: same value, a lease already
		// longer.
		{"a shorter extend again", time.Second, func(t *testing.T, key string) {
			_, err := s.Extend(ctx, key, token, time.Second)
			require.NoError(t, err)
		}},
		{"an extend by the recorded length", time.Second, func(t *testing.T, key string) {
			_, err := s.Extend(ctx, key, token, 0)
			require.NoError(t, err)
		}},
	} {
		t.Run(later.name, func(t *testing.T) {
			key := "late/" + t.Name()
			_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: time.Minute})
			require.NoError(t, err)
			if later.before > 0 {
				_, err = s.Extend(ctx, key, token, later.before)
				require.NoError(t, err)
			}
			reads := make([]script.LockValue, len(nodes))
			for i, n := range nodes {
				reads[i], _, err = script.Inspect(ctx, n, key)
				require.NoError(t, err)
			}
			later.do(t, key)
			for i, n := range nodes {
				require.ErrorIs(t, script.Release(ctx, Clocked(n), key, digest, reads[i], true), script.ErrMoved, "node %d: the late delete finds the lease changed", i)
			}
			_, err = s.Inspect(ctx, key)
			require.NoError(t, err, "and leaves it")
		})
	}
}

// Clocked is c for the scripts that carry rule D's deadline, sampling c's
// clock itself: a test's late delete, sent now, lands within its
// deadline, so what refuses it is the script's own check (V2).
func Clocked(c redis.Scripter) script.Clocked {
	return script.Clocked{Scripter: c, Clocks: script.NewClocks(time.Second, false)}
}
