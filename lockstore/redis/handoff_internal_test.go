package redis

import (
	"context"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A release through the gateway whose waiter was told it is first sends
// that waiter's try in its own pipeline, right behind it: one write
// carries both scripts, and the waiter is granted by that try.
func TestReleaseCarriesTheFirstWaitersTry(t *testing.T) {
	srv := redistest.Start(t)
	s := openInternal(t, srv)
	ctx := context.Background()
	const key = "handoff/first"

	holder := lockstore.NewToken()
	for _, k := range []string{"warm-up", key} { // the first release loads its script
		_, err := s.Acquire(ctx, k, lockstore.AcquireRequest{Token: holder, TTL: time.Minute})
		require.NoError(t, err)
	}
	require.NoError(t, s.Release(ctx, "warm-up", holder))
	waiter := lockstore.NewToken()
	granted := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: waiter, TTL: time.Minute, Wait: 20 * time.Second})
		granted <- err
	}()
	require.Eventually(t, func() bool { return s.handoffReady(key) }, 5*time.Second, time.Millisecond, "the waiter was told it is first")

	// With replicas to wait for, the waiter's try goes on a connection of
	// its own with its WAIT, not through the batch: a release must not wait
	// for it there.
	s.acks.replicas = 1
	assert.Nil(t, s.handoff(key), "no pair with replicas to wait for")
	s.acks.replicas = 0

	writes, calls := s.batch.Writes.Load(), s.batch.Calls.Load()
	require.NoError(t, s.Release(ctx, key, holder))
	require.NoError(t, <-granted)
	assert.Equal(t, int64(1), s.batch.Writes.Load()-writes, "one write for the release and the try")
	assert.Equal(t, int64(2), s.batch.Calls.Load()-calls, "two scripts: the release, the waiter's try")
}

// handoffReady: key's oldest waiter here can go with a release.
func (s *Store) handoffReady(key string) bool {
	s.rooms.mu.Lock()
	r := s.rooms.byKey[roomID(key, false)]
	s.rooms.mu.Unlock()
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.order.Front()
	if e == nil {
		return false
	}
	w := e.Value.(*roomWaiter)
	return !w.busy && w.queued && w.head
}
