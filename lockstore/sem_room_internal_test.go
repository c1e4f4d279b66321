package lockstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/redistest"
)

// TestSemRoomDropsItsAbandonedTicket: as TestRoomDropsItsAbandonedTicket,
// for a semaphore. A ticket of this gateway whose waiter has gone without
// leaving stands first in line, kept alive by its gateway's heartbeat, and
// the release names it, so nobody wakes: the heartbeat must find a ticket
// of its own among those that may take the free permit, with no waiter
// behind it, take it out of the line, and so let the next waiter through.
func TestSemRoomDropsItsAbandonedTicket(t *testing.T) {
	srv := redistest.Start(t)
	s, err := OpenRedis(srv.URL(), RedisOptions{Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	c := srv.Client()

	req := func(wait time.Duration) PermitRequest {
		return PermitRequest{Token: NewToken(), TTL: time.Minute, Limit: 1, Wait: wait, Owner: "w"}
	}
	holder, err := s.SemAcquire(ctx, "k", req(0))
	require.NoError(t, err)
	ghost := s.rooms.gateway + ".ghost"
	now, err := c.Time(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, c.ZAdd(ctx, semQueueKey("k"), redis.Z{Score: float64(now.UnixMicro() - 1000), Member: ghost}).Err())
	require.NoError(t, c.ZAdd(ctx, semAliveKey("k"), redis.Z{Score: float64(now.UnixMilli() + 60_000), Member: s.rooms.gateway}).Err())

	go func() {
		time.Sleep(200 * time.Millisecond)
		assert.NoError(t, s.SemRelease(ctx, "k", holder.Token))
	}()
	start := time.Now()
	_, err = s.SemAcquire(ctx, "k", req(5*time.Second))
	require.NoError(t, err, "the abandoned ticket held up the line")
	t.Logf("granted %v after queueing behind an abandoned ticket", time.Since(start))
	_, err = c.ZScore(ctx, semQueueKey("k"), ghost).Result()
	assert.ErrorIs(t, err, redis.Nil, "the abandoned ticket is gone")
}
