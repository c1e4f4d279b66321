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

// TestRoomDropsItsAbandonedTicket: a ticket of this gateway whose waiter
// has gone without leaving (its leave failed) stands first in line, and its
// gateway's heartbeat keeps it alive. The release names it, so nobody
// wakes; the heartbeat must see a ticket of its own that no waiter holds,
// take it out of the line, and so let the next waiter through.
func TestRoomDropsItsAbandonedTicket(t *testing.T) {
	srv := redistest.Start(t)
	s := openInternal(t, srv)
	ctx := context.Background()
	c := srv.Client()

	holder, err := s.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)
	ghost := s.rooms.gateway + ".ghost"
	now, err := c.Time(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, c.ZAdd(ctx, script.QueueKey("k"), redis.Z{Score: float64(now.UnixMicro() - 1000), Member: ghost}).Err())
	require.NoError(t, c.ZAdd(ctx, script.AliveKey("k"), redis.Z{Score: float64(now.UnixMilli() + 60_000), Member: s.rooms.gateway}).Err())

	go func() {
		time.Sleep(200 * time.Millisecond)
		assert.NoError(t, s.Release(ctx, "k", holder.Token))
	}()
	start := time.Now()
	_, err = s.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute, Wait: 5 * time.Second})
	require.NoError(t, err, "the abandoned ticket held up the line")
	t.Logf("granted %v after queueing behind an abandoned ticket", time.Since(start))
	_, err = c.ZScore(ctx, script.QueueKey("k"), ghost).Result()
	assert.ErrorIs(t, err, redis.Nil, "the abandoned ticket is gone")
}

// openInternal is a Redis store on srv for the package's internal tests,
// closed when the test ends.
func openInternal(t *testing.T, srv *redistest.Server) *Store {
	t.Helper()
	s, err := Open(srv.URL(), Options{Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}
