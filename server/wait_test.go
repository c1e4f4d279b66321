package server_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
)

// TestPreferWait: the RFC 7240 form of wait_ms, answered with
// Preference-Applied; a wait that runs out is a 409, never a 504.
func TestPreferWait(t *testing.T) {
	g := apitest.Start(t, map[string]string{"LOCKGW_MAX_WAIT": "2s"})
	c := apitest.NewClient(g.URL)
	path := "/locks/" + apitest.Key(t)
	r := c.Do(t, "PUT", path, []byte(`{"ttl_ms":1500}`), apitest.JSON...)
	require.Equal(t, http.StatusCreated, r.Status)

	// Asks for 5 s, gets the configured 2 s: the lease ends after 1.5 s.
	start := time.Now()
	r = c.Do(t, "PUT", path, nil, "Prefer", "respond-async, wait=5")
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	assert.Equal(t, "wait=2", r.Header.Get("Preference-Applied"))
	assert.GreaterOrEqual(t, time.Since(start), time.Second)

	start = time.Now()
	r = c.Do(t, "PUT", path, nil, "Prefer", "wait=1")
	require.Equal(t, http.StatusConflict, r.Status)
	assert.Equal(t, "wait=1", r.Header.Get("Preference-Applied"))
	retry, err := strconv.Atoi(r.Header.Get("Retry-After"))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, retry, 1)
	assert.GreaterOrEqual(t, time.Since(start), time.Second)

	r = c.Do(t, "PUT", path, nil, "Prefer", "wait=soon")
	require.Equal(t, http.StatusBadRequest, r.Status)

	// Seconds that would overflow a time.Duration are capped, not wrapped.
	r = c.Do(t, "PUT", path+"-free", nil, "Prefer", "wait=99999999999999")
	require.Equal(t, http.StatusCreated, r.Status)
	assert.Equal(t, "wait=2", r.Header.Get("Preference-Applied"))
}

// TestWaitMsWinsOverPrefer: with both, the body's wait_ms is the wait, and
// no Preference-Applied says the header was not honoured (RFC 7240 §3).
// The body is the client's own; a Prefer header may come from a proxy.
func TestWaitMsWinsOverPrefer(t *testing.T) {
	g := apitest.Start(t, map[string]string{"LOCKGW_MAX_WAIT": "5s"})
	c := apitest.NewClient(g.URL)
	path := "/locks/" + apitest.Key(t)
	require.Equal(t, http.StatusCreated, c.Do(t, "PUT", path, []byte(`{"ttl_ms":60000}`), apitest.JSON...).Status)

	start := time.Now()
	r := c.Do(t, "PUT", path, []byte(`{"wait_ms":300}`), "Content-Type", "application/json", "Prefer", "wait=3")
	took := time.Since(start)
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	assert.Empty(t, r.Header.Get("Preference-Applied"), "the preference was not applied")
	assert.GreaterOrEqual(t, took, 300*time.Millisecond)
	assert.Less(t, took, 3*time.Second, "waited for Prefer: wait=3, not wait_ms=300")

	// wait_ms 0 is an explicit "try once": it wins too.
	start = time.Now()
	r = c.Do(t, "PUT", path, []byte(`{"wait_ms":0}`), "Content-Type", "application/json", "Prefer", "wait=3")
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	assert.Empty(t, r.Header.Get("Preference-Applied"))
	assert.Less(t, time.Since(start), 3*time.Second)
}

// TestDisconnectedWaiterLeavesNoQueue: a client that gives up while waiting
// leaves nothing in Redis.
func TestDisconnectedWaiterLeavesNoQueue(t *testing.T) {
	srv := redistest.Start(t)
	g := apitest.Start(t, map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_URL": srv.URL()})
	c := apitest.NewClient(g.URL)
	key := apitest.Key(t)
	require.Equal(t, http.StatusCreated, c.Do(t, "PUT", "/locks/"+key, nil).Status)

	impatient := apitest.NewClient(g.URL)
	impatient.HTTP.Timeout = 300 * time.Millisecond
	_, err := impatient.Try(t, "PUT", "/locks/"+key, []byte(`{"wait_ms":10000}`), apitest.JSON...)
	require.Error(t, err, "the client gave up")

	rdb := srv.Client()
	require.Eventually(t, func() bool {
		n, err := rdb.Exists(context.Background(), "lockgw:{"+key+"}:queue", "lockgw:{"+key+"}:alive").Result()
		return err == nil && n == 0
	}, 2*time.Second, 20*time.Millisecond, "the waiter's queue entry is gone")
}
