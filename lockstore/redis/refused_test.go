package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	lockredis "github.com/lockgateway/lockgateway/lockstore/redis"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRedisRefusesWrites: a Redis that answers but refuses writes is a
// *RefusedError saying why, never an unexpected error: out of memory,
// a read-only replica, too few replicas, a script that runs too long. Ping
// writes, so it says the same. Out of memory, a holder can still extend
// and release.
func TestRedisRefusesWrites(t *testing.T) {
	ctx := context.Background()
	acquire := func(s *lockredis.Store, key string) error {
		_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
		return err
	}
	refused := func(t *testing.T, err error, reason string) {
		t.Helper()
		require.ErrorIs(t, err, lockstore.ErrRefused)
		require.ErrorIs(t, err, lockstore.ErrUnavailable, "callers that only know outages treat it as one")
		r, ok := errors.AsType[*lockstore.RefusedError](err)
		require.True(t, ok)
		assert.Equal(t, reason, r.Reason)
	}

	t.Run("oom", func(t *testing.T) {
		srv := redistest.Start(t)
		s := backendtest.NewRedis(t, srv)
		held, err := s.Acquire(ctx, "held", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
		require.NoError(t, err)
		srv.Fill("8mb")

		refused(t, acquire(s, "fresh"), "oom")
		refused(t, s.Ping(ctx), "oom")
		// (A grant's function is refused as a whole out of memory, where its
		// script runs: these two go as the script; found by review.)
		_, err = s.Acquire(ctx, "held", lockstore.AcquireRequest{Token: held.Token, TTL: time.Minute})
		require.NoError(t, err, "a renewal by PUT with the holder's token needs no memory")
		_, err = s.Acquire(ctx, "held", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
		require.ErrorAs(t, err, new(*lockstore.HeldError), "a PUT on a key another token holds is told so, out of memory too")
		_, err = s.Extend(ctx, "held", held.Token, time.Minute)
		require.NoError(t, err, "an extend needs no memory")
		require.NoError(t, s.Release(ctx, "held", held.Token), "a release frees memory")

		require.NoError(t, srv.Client().ConfigSet(ctx, "maxmemory", "0").Err())
		require.NoError(t, s.Ping(ctx))
		require.NoError(t, acquire(s, "fresh"))
	})
	t.Run("readonly", func(t *testing.T) {
		primary, srv := redistest.Start(t), redistest.Start(t)
		s := backendtest.NewRedis(t, srv)
		host, port, _ := strings.Cut(primary.Addr(), ":")
		require.NoError(t, srv.Client().SlaveOf(ctx, host, port).Err())
		refused(t, acquire(s, "k"), "readonly")
		refused(t, s.Ping(ctx), "readonly")
	})
	t.Run("noreplicas", func(t *testing.T) {
		srv := redistest.Start(t)
		s := backendtest.NewRedis(t, srv)
		held, err := s.Acquire(ctx, "held", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
		require.NoError(t, err)
		require.NoError(t, srv.Client().ConfigSet(ctx, "min-replicas-to-write", "1").Err())
		refused(t, acquire(s, "k"), "noreplicas")
		refused(t, s.Release(ctx, "held", held.Token), "noreplicas")
	})
	t.Run("busy", func(t *testing.T) {
		srv := redistest.Start(t)
		s := backendtest.NewRedis(t, srv)
		rdb := srv.Client()
		require.NoError(t, rdb.ConfigSet(ctx, "busy-reply-threshold", "10").Err())
		// A read-only script that loops until SCRIPT KILL ends it.
		looping := make(chan struct{})
		go func() {
			defer close(looping)
			_ = redis.NewClient(&redis.Options{Addr: srv.Addr()}).Eval(ctx, "while true do end", nil).Err()
		}()
		t.Cleanup(func() { <-looping })
		time.Sleep(100 * time.Millisecond)
		refused(t, acquire(s, "k"), "busy")
		require.Eventually(t, func() bool { return rdb.ScriptKill(ctx).Err() == nil }, 5*time.Second, 20*time.Millisecond)
		require.Eventually(t, func() bool { return acquire(s, "k") == nil }, 5*time.Second, 20*time.Millisecond)
	})
}
