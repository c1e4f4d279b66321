package server_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
)

// TestReviewHoldAtLeastLockDelay (review, rule L): a hold acquired with
// hold_at_least_ms and lock_delay_ms whose client vanishes right after the
// grant. docs/api.md promises the key is kept from every token until
// hold_at_least_ms after the grant, "whatever releases it sooner", and that
// the end of a hold keeps it too; lock_delay_ms promises the vanished
// holder keeps it *longer*. On HEAD the stream's end extends the lease by
// the lock delay instead of releasing it, so no lingering value is left:
// the key is free when the (short) lease runs out, long before the
// hold-at-least end, and another token is granted it.
func TestReviewHoldAtLeastLockDelay(t *testing.T) {
	srv := redistest.Start(t)
	g := apitest.Start(t, map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_URL": srv.URL()})
	c := apitest.NewClient(g.URL)
	path := lockPath(apitest.Key(t))
	start := time.Now()
	events, resp := c.Hold(t, path, []byte(`{"ttl_ms":500,"hold_at_least_ms":4000,"lock_delay_ms":100}`))
	require.Nil(t, resp)
	_, _ = nextEvent(t, events, 2*time.Second) // acquired
	events.Close()                             // the job ended (or the host vanished) at once
	time.Sleep(1500 * time.Millisecond)        // well past TTL and lock delay, well before hold_at_least
	r := c.Do(t, "PUT", path, []byte(`{"ttl_ms":1000}`), apitest.JSON...)
	if time.Since(start) < 3500*time.Millisecond {
		require.Equal(t, http.StatusConflict, r.Status,
			"another token granted the key %v after a grant with hold_at_least_ms 4000 (lock_delay_ms 100): %s", time.Since(start), r.Body)
	}
}
