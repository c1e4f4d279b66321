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

// The grant that makes a waiter the first tells it how long the new lease
// is: it sleeps until then without a try of its own to learn it, and takes
// the key when that lease runs out unreleased.
func TestFirstWaiterToldTheLeaseLength(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s := backendtest.NewRedis(t, srv)
	const key = "line/told"
	queue := "lockgw:{" + key + "}:queue"
	// Load release.lua on the server (a first EVALSHA is answered NOSCRIPT
	// and sent again as EVAL), so that the count below is the calls'.
	warm := lockstore.NewToken()
	_, err := s.Acquire(ctx, "line/warm", lockstore.AcquireRequest{Token: warm, TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, "line/warm", warm))

	holder := lockstore.NewToken()
	_, err = s.Acquire(ctx, key, lockstore.AcquireRequest{Token: holder, TTL: time.Minute})
	require.NoError(t, err)
	type result struct {
		token string
		err   error
	}
	granted := make(chan result, 2)
	wait := func(token string, ttl time.Duration) {
		_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: ttl, Wait: 20 * time.Second})
		granted <- result{token, err}
	}
	first, second := lockstore.NewToken(), lockstore.NewToken()
	go wait(first, 400*time.Millisecond)
	require.Eventually(t, func() bool { return srv.Client().ZCard(ctx, queue).Val() == 1 }, 5*time.Second, time.Millisecond)
	go wait(second, time.Minute)
	require.Eventually(t, func() bool { return srv.Client().ZCard(ctx, queue).Val() == 2 }, 5*time.Second, time.Millisecond)

	n := scripts(t, srv, func() {
		require.NoError(t, s.Release(ctx, key, holder))
		r := <-granted
		require.NoError(t, r.err)
		require.Equal(t, first, r.token)
		time.Sleep(50 * time.Millisecond) // room for a try the second waiter must not make
	})
	assert.EqualValues(t, 2, n, "the release and the first waiter's grant; the second waiter, told it is first and for how long, tries nothing")

	// The first waiter's lease (400 ms) runs out unreleased: the second
	// takes the key then.
	r := <-granted
	require.NoError(t, r.err)
	assert.Equal(t, second, r.token)
}
