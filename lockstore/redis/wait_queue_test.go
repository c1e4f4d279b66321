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

// A waiting acquire on a key others of the same gateway already wait for
// queues itself with its first try: one script, not a try and then a
// queued try. It is still granted in its turn, after the waiters before
// it.
func TestWaiterJoinsALineInOneScript(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s := backendtest.NewRedis(t, srv)
	const key = "line/one-script"
	queue := "lockgw:{" + key + "}:queue"

	holder := lockstore.NewToken()
	_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: holder, TTL: time.Minute})
	require.NoError(t, err)

	type result struct {
		token string
		err   error
	}
	granted := make(chan result, 2)
	wait := func(token string) {
		_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: time.Minute, Wait: 20 * time.Second})
		granted <- result{token, err}
	}
	queued := func(n int64) func() bool {
		return func() bool { return srv.Client().ZCard(ctx, queue).Val() == n }
	}

	first, second := lockstore.NewToken(), lockstore.NewToken()
	alone := scripts(t, srv, func() {
		go wait(first)
		require.Eventually(t, queued(1), 5*time.Second, time.Millisecond)
	})
	assert.EqualValues(t, 2, alone, "the first waiter: a try, then a queued try")
	behind := scripts(t, srv, func() {
		go wait(second)
		require.Eventually(t, queued(2), 5*time.Second, time.Millisecond)
	})
	assert.EqualValues(t, 1, behind, "the second waiter: one queued try")

	require.NoError(t, s.Release(ctx, key, holder))
	r := <-granted
	require.NoError(t, r.err)
	assert.Equal(t, first, r.token, "granted in arrival order")
	require.NoError(t, s.Release(ctx, key, first))
	r = <-granted
	require.NoError(t, r.err)
	assert.Equal(t, second, r.token)
}

// scripts counts the scripts srv ran during op.
func scripts(t *testing.T, srv *redistest.Server, op func()) int64 {
	t.Helper()
	ctx := context.Background()
	before, err := srv.CommandCalls(ctx)
	require.NoError(t, err)
	op()
	after, err := srv.CommandCalls(ctx)
	require.NoError(t, err)
	return after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
}
