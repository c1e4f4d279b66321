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

// TestSemRoomDropsItsAbandonedTicket: as TestRoomDropsItsAbandonedTicket,
// for a semaphore. A ticket of this gateway whose waiter has gone without
// leaving stands first in line, kept alive by its gateway's heartbeat, and
// the release names it, so nobody wakes: the heartbeat must find a ticket
// of its own among those that may take the free permit, with no waiter
// behind it, take it out of the line, and so let the next waiter through.
func TestSemRoomDropsItsAbandonedTicket(t *testing.T) {
	srv := redistest.Start(t)
	s := openInternal(t, srv)
	ctx := context.Background()
	c := srv.Client()

	req := func(wait time.Duration) lockstore.PermitRequest {
		return lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Minute, Limit: 1, Wait: wait, Owner: "w"}
	}
	holder, err := s.SemAcquire(ctx, "k", req(0))
	require.NoError(t, err)
	ghost := s.rooms.gateway + ".ghost"
	now, err := c.Time(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, c.ZAdd(ctx, script.SemQueueKey("k"), redis.Z{Score: float64(now.UnixMicro() - 1000), Member: ghost}).Err())
	require.NoError(t, c.ZAdd(ctx, script.SemAliveKey("k"), redis.Z{Score: float64(now.UnixMilli() + 60_000), Member: s.rooms.gateway}).Err())

	go func() {
		time.Sleep(200 * time.Millisecond)
		assert.NoError(t, s.SemRelease(ctx, "k", holder.Token))
	}()
	start := time.Now()
	_, err = s.SemAcquire(ctx, "k", req(5*time.Second))
	require.NoError(t, err, "the abandoned ticket held up the line")
	t.Logf("granted %v after queueing behind an abandoned ticket", time.Since(start))
	_, err = c.ZScore(ctx, script.SemQueueKey("k"), ghost).Result()
	assert.ErrorIs(t, err, redis.Nil, "the abandoned ticket is gone")
}

// TestSemRoomWakesTheFirstK: two permits of a full limit-3 semaphore
// vanish with no notification (deleted behind the store's back): the
// heartbeat wakes the first two waiters in line, who take them, and the
// third, owed nothing, keeps waiting until its wait runs out.
func TestSemRoomWakesTheFirstK(t *testing.T) {
	srv := redistest.Start(t)
	s := openInternal(t, srv)
	ctx := context.Background()
	c := srv.Client()

	req := func(wait time.Duration) lockstore.PermitRequest {
		return lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Minute, Limit: 3, Wait: wait, Owner: "w"}
	}
	var held []lockstore.PermitRequest
	for range 3 {
		r := req(0)
		_, err := s.SemAcquire(ctx, "k", r)
		require.NoError(t, err)
		held = append(held, r)
	}
	type result struct {
		i   int
		err error
	}
	results := make(chan result, 3)
	for i := range 3 {
		go func() {
			_, err := s.SemAcquire(ctx, "k", req(3*time.Second))
			results <- result{i, err}
		}()
		require.Eventually(t, func() bool { return c.ZCard(ctx, script.SemQueueKey("k")).Val() == int64(i+1) },
			2*time.Second, 5*time.Millisecond)
	}
	// Take two permits away, as their expiry would, but with no waiter
	// first in line to wake for it (TTLs of a minute) and no notification.
	for _, r := range held[1:] {
		d := script.DigestHex(r.Token)
		slot, err := c.HGet(ctx, script.SemPermitsKey("k"), "t:"+d).Result()
		require.NoError(t, err)
		require.NoError(t, c.HDel(ctx, script.SemPermitsKey("k"), slot, "t:"+d).Err())
		require.NoError(t, c.ZRem(ctx, script.SemExpiryKey("k"), slot).Err())
	}
	start := time.Now()
	for range 2 {
		select {
		case r := <-results:
			require.NoError(t, r.err)
			// Woken together, either may take its permit first.
			assert.Less(t, r.i, 2, "a permit went to the first two in line")
			t.Logf("waiter %d granted %v after the permits went", r.i, time.Since(start))
		case <-time.After(2500 * time.Millisecond):
			t.Fatal("the heartbeat did not wake the first two waiters")
		}
	}
	r := <-results
	assert.Equal(t, 2, r.i)
	assert.ErrorIs(t, r.err, lockstore.ErrSemaphoreFull, "the third was owed nothing")
}
