package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"
)

// Rule E (docs/safety.md): every way the redis backend answers a holder
// tells it expires_at = (its clock before the call) + ttl − (1% of ttl +
// 2 ms), since Redis ends the key by a clock that may run 1% faster than the
// gateway's. Each answer below must fall in [before, after] + ttl − that
// allowance, where before and after bracket the call. Telling start + ttl
// (the backend before rule E) is 102 ms past the upper bound for 10 s.
func TestRedisToldEndAllowsForTheNodeClock(t *testing.T) {
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	ctx := context.Background()
	const ttl = 10 * time.Second
	allowance := ttl/100 + 2*time.Millisecond

	check := func(what string, call func() time.Time) {
		t.Helper()
		before := time.Now()
		told := call()
		after := time.Now()
		assert.False(t, told.After(after.Add(ttl-allowance)), "%s: told %v, later than the call's end + ttl − allowance by %v",
			what, told, told.Sub(after.Add(ttl-allowance)))
		assert.False(t, told.Before(before.Add(ttl-allowance)), "%s: told %v, earlier than the call's start + ttl − allowance by %v",
			what, told, before.Add(ttl-allowance).Sub(told))
	}
	lock := lockstore.NewToken()
	check("acquire", func() time.Time {
		l, err := s.Acquire(ctx, "told/lock", lockstore.AcquireRequest{Token: lock, TTL: ttl})
		require.NoError(t, err)
		return l.ExpiresAt
	})
	check("renewal (same-token acquire)", func() time.Time {
		l, err := s.Acquire(ctx, "told/lock", lockstore.AcquireRequest{Token: lock, TTL: ttl})
		require.NoError(t, err)
		require.True(t, l.Renewed)
		return l.ExpiresAt
	})
	check("extend", func() time.Time {
		l, err := s.Extend(ctx, "told/lock", lock, ttl)
		require.NoError(t, err)
		return l.ExpiresAt
	})
	check("batched extend", func() time.Time {
		out := s.ExtendBatch(ctx, []lockstore.Extension{{Key: "told/lock", Token: lock, TTL: ttl}})
		require.NoError(t, out[0].Err)
		return out[0].Lease.ExpiresAt
	})

	// A waited grant: its try runs once the holder lets go, and is told
	// from that try's start.
	held := lockstore.NewToken()
	_, err := s.Acquire(ctx, "told/waited", lockstore.AcquireRequest{Token: held, TTL: ttl})
	require.NoError(t, err)
	// began before the timer is set: the release comes at least 100 ms
	// after it (measured after, under load it was later than the timer's
	// start by more than the margin the check leaves).
	began := time.Now()
	time.AfterFunc(100*time.Millisecond, func() { _ = s.Release(context.Background(), "told/waited", held) })
	l, err := s.Acquire(ctx, "told/waited", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: ttl, Wait: 5 * time.Second})
	require.NoError(t, err)
	assert.False(t, l.ExpiresAt.After(time.Now().Add(ttl-allowance)), "waited acquire: told %v", l.ExpiresAt)
	assert.True(t, l.ExpiresAt.After(began.Add(100*time.Millisecond+ttl-allowance)), "waited acquire: told from its try, not from the wait's start: %v", l.ExpiresAt)

	permit := lockstore.NewToken()
	check("permit", func() time.Time {
		p, err := s.SemAcquire(ctx, "told/sem", lockstore.PermitRequest{Token: permit, TTL: ttl, Limit: 2})
		require.NoError(t, err)
		return p.ExpiresAt
	})
	check("permit renewal", func() time.Time {
		p, err := s.SemAcquire(ctx, "told/sem", lockstore.PermitRequest{Token: permit, TTL: ttl, Limit: 2})
		require.NoError(t, err)
		return p.ExpiresAt
	})
	check("permit extend", func() time.Time {
		p, err := s.SemExtend(ctx, "told/sem", permit, ttl)
		require.NoError(t, err)
		return p.ExpiresAt
	})
	check("batched permit extend", func() time.Time {
		out := s.SemExtendBatch(ctx, []lockstore.Extension{{Key: "told/sem", Token: permit, TTL: ttl}})
		require.NoError(t, out[0].Err)
		return out[0].Permit.ExpiresAt
	})
}

// A read reports what Redis says is left, with no allowance (rule E: it
// promises a holder nothing): right after an extend for ttl, at least ttl
// less the time since the extend was sent and Redis's whole millisecond.
func TestRedisInspectReportsWhatRedisSays(t *testing.T) {
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	ctx := context.Background()
	const ttl = 10 * time.Second
	token := lockstore.NewToken()
	_, err := s.Acquire(ctx, "told/read", lockstore.AcquireRequest{Token: token, TTL: ttl})
	require.NoError(t, err)
	sent := time.Now()
	_, err = s.Extend(ctx, "told/read", token, ttl)
	require.NoError(t, err)
	got, err := s.Inspect(ctx, "told/read")
	require.NoError(t, err)
	assert.GreaterOrEqual(t, got.Left, ttl-time.Since(sent)-time.Millisecond, "Left is Redis's PTTL, not less the allowance")
}
