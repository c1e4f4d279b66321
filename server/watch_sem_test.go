package server_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
)

// TestWatchSemaphore: on every backend, a semaphore's ETag names its
// permits; a long-poll on one gateway wakes within a second of a permit
// granted through another; the stream reports each permit's grant,
// extend, release and expiry, in order, with increasing ids.
func TestWatchSemaphore(t *testing.T) {
	watchPair(t, func(t *testing.T, a, b *apitest.Gateway) {
		ca, cb := apitest.NewClient(a.URL), apitest.NewClient(b.URL)
		path := "/semaphores/" + apitest.Key(t)

		r := cb.Do(t, "GET", path, nil)
		require.Equal(t, http.StatusNotFound, r.Status)
		require.Equal(t, `W/"free"`, r.Header.Get("ETag"))
		r = cb.Do(t, "GET", path, nil, "If-None-Match", `W/"free"`)
		require.Equal(t, http.StatusNotModified, r.Status)

		events, resp := cb.Stream(t, path)
		require.Nil(t, resp)
		defer events.Close()
		next := eventsOf(t, events)
		next("released", time.Now()) // the opening state: free

		polled := startPoll(t, cb, path, `W/"free"`)
		at := time.Now()
		r = ca.Do(t, "PUT", path, []byte(`{"limit":2,"ttl_ms":30000,"owner":"p1"}`), apitest.JSON...)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		token1 := r.JSON(t)["token"].(string)
		fence1 := r.JSON(t)["fence"].(float64)
		r = pollWoke(t, polled, at, "grant")
		require.Equal(t, http.StatusOK, r.Status)
		assert.Regexp(t, `^W/"permits-[0-9a-f]{24}"$`, r.Header.Get("ETag"))
		assert.EqualValues(t, 1, r.JSON(t)["held"])
		e1 := next("acquired", at)
		assert.Equal(t, fence1, e1.Data["permit"].(map[string]any)["fence"])
		assert.EqualValues(t, 1, e1.Data["held"])

		at = time.Now()
		r = ca.Do(t, "PUT", path, []byte(`{"limit":2,"ttl_ms":1500,"owner":"p2"}`), apitest.JSON...)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		fence2 := r.JSON(t)["fence"].(float64)
		expires2, err := time.Parse(time.RFC3339Nano, r.JSON(t)["expires_at"].(string))
		require.NoError(t, err)
		e2 := next("acquired", at)
		assert.Equal(t, fence2, e2.Data["permit"].(map[string]any)["fence"])
		assert.EqualValues(t, 2, e2.Data["held"])

		at = time.Now()
		r = ca.Do(t, "PATCH", path, []byte(`{"ttl_ms":60000}`), "Content-Type", "application/json", "Lock-Token", token1)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		e3 := next("extended", at)
		assert.Equal(t, fence1, e3.Data["permit"].(map[string]any)["fence"])

		e4 := next("expired", expires2)
		assert.Equal(t, fence2, e4.Data["permit"].(map[string]any)["fence"])
		assert.EqualValues(t, 1, e4.Data["held"])

		at = time.Now()
		require.Equal(t, http.StatusNoContent, ca.Do(t, "DELETE", path, nil, "Lock-Token", token1).Status)
		e5 := next("released", at)
		assert.Equal(t, fence1, e5.Data["permit"].(map[string]any)["fence"])
		assert.EqualValues(t, 0, e5.Data["held"])

		var last uint64
		for _, e := range []apitest.Event{e1, e2, e3, e4, e5} {
			id, err := strconv.ParseUint(e.ID, 10, 64)
			require.NoError(t, err)
			assert.Greater(t, id, last)
			last = id
		}
	})
}
