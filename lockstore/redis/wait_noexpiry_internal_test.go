package redis

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

// TestFirstWaiterOnAKeyWithoutExpiryDoesNotSpin: a first waiter wakes a
// millisecond after the lease it found runs out (wait.Queued), even with
// under a millisecond left (PTTL 0). A lock key without an expiry (PTTL
// -1: none of the gateway's scripts leaves one, so a key written by hand)
// never runs out, and read as 0 left it made that waiter try every
// millisecond for its whole wait; it sleeps until a release tells it now.
func TestFirstWaiterOnAKeyWithoutExpiryDoesNotSpin(t *testing.T) {
	srv := redistest.Start(t)
	s := openInternal(t, srv)
	ctx := context.Background()
	const key = "noexpiry/k"
	_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)
	require.True(t, srv.Client().Persist(ctx, script.LockKey(key)).Val(), "the key's expiry removed")

	before := scriptCalls(t, srv)
	const wait = 400 * time.Millisecond
	_, err = s.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute, Wait: wait})
	require.ErrorIs(t, err, lockstore.ErrHeld)
	calls := scriptCalls(t, srv) - before
	t.Logf("%d script calls in a wait of %v", calls, wait)
	assert.Less(t, calls, int64(20), "the waiter tried over and over (one try per millisecond made some 300)")
}

// scriptCalls is how many scripts (EVALSHA, EVAL, FCALL) srv has run.
func scriptCalls(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	calls, err := srv.CommandCalls(context.Background())
	require.NoError(t, err)
	return calls["evalsha"] + calls["eval"] + calls["fcall"]
}
