package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
)

// nextEvent waits for the stream's next event, failing after within.
func nextEvent(t *testing.T, events *apitest.Events, within time.Duration) (apitest.Event, bool) {
	t.Helper()
	select {
	case e, ok := <-events.C:
		return e, ok
	case <-time.After(within):
		t.Fatalf("no event within %v", within)
		return apitest.Event{}, false
	}
}

// held reports whether key is held, by a GET.
func held(t *testing.T, c *apitest.Client, path string) bool {
	return c.Do(t, "GET", path, nil).Status == http.StatusOK
}

// TestHold: a hold outlives many TTLs while its stream is open, and the
// key is free again as soon as the client closes it.
func TestHold(t *testing.T) {
	backends(t, func(t *testing.T, g *apitest.Gateway) {
		c := apitest.NewClient(g.URL)
		path := lockPath(apitest.Key(t))
		// A TTL roomy enough for a loaded machine running -race: renewals
		// every third of it.
		events, resp := c.Hold(t, path, []byte(`{"ttl_ms":1000,"owner":"cron"}`))
		require.Nil(t, resp)
		acq, _ := nextEvent(t, events, 2*time.Second)
		require.Equal(t, "acquired", acq.Name)
		require.NotEmpty(t, acq.Data["token"], "the grant carries the token")
		fence := acq.Data["fence"]

		deadline := time.Now().Add(3500 * time.Millisecond) // three and a half TTLs
		renewals := 0
		for time.Now().Before(deadline) {
			e, ok := nextEvent(t, events, time.Second)
			require.True(t, ok, "the stream stays open")
			require.Equal(t, "renewed", e.Name)
			assert.Equal(t, fence, e.Data["fence"])
			assert.NotContains(t, e.Data, "token")
			renewals++
		}
		assert.GreaterOrEqual(t, renewals, 8, "renewed about every third of the TTL")
		other := c.Do(t, "PUT", path, []byte(`{"ttl_ms":1000}`), apitest.JSON...)
		require.Equal(t, http.StatusConflict, other.Status, "held all along")

		closed := time.Now()
		events.Close()
		require.Eventually(t, func() bool { return !held(t, c, path) }, 2*time.Second, 5*time.Millisecond,
			"the key is free once the client went away")
		t.Logf("free %v after the client closed the stream", time.Since(closed).Round(time.Millisecond))
		assert.Less(t, time.Since(closed), 500*time.Millisecond, "released at once, well before its TTL could end")
	})
}

// TestHoldEnds: each way a hold ends sends its final event and closes the
// stream.
func TestHoldEnds(t *testing.T) {
	backends(t, func(t *testing.T, g *apitest.Gateway) {
		c := apitest.NewClient(g.URL)

		t.Run("released by the holder", func(t *testing.T) {
			path := lockPath(apitest.Key(t))
			events, resp := c.Hold(t, path, []byte(`{"ttl_ms":1000}`))
			require.Nil(t, resp)
			defer events.Close()
			acq, _ := nextEvent(t, events, 2*time.Second)
			token := acq.Data["token"].(string)
			require.Equal(t, http.StatusNoContent, c.Do(t, "DELETE", path, nil, "Lock-Token", token).Status)
			for {
				e, ok := nextEvent(t, events, 3*time.Second)
				require.True(t, ok, "a final event before the stream closes")
				if e.Name == "renewed" {
					continue
				}
				assert.Equal(t, "released", e.Name)
				assert.Equal(t, "released", e.Data["reason"])
				break
			}
			_, ok := nextEvent(t, events, 2*time.Second)
			assert.False(t, ok, "closed after the final event")
		})

		// The gateway's own end (max_hold_ms; the shutdown, below) tells the
		// holder first, and frees the key once the holder closed its
		// stream: freed at the cap, the key could go to another client
		// before the holder had read that it ended (found by review).
		t.Run("max_hold_ms", func(t *testing.T) {
			path := lockPath(apitest.Key(t))
			start := time.Now()
			events, resp := c.Hold(t, path, []byte(`{"ttl_ms":10000,"max_hold_ms":400}`))
			require.Nil(t, resp)
			defer events.Close()
			for {
				e, ok := nextEvent(t, events, 3*time.Second)
				require.True(t, ok)
				if e.Name == "acquired" || e.Name == "renewed" {
					continue
				}
				assert.Equal(t, "ended", e.Name)
				assert.Equal(t, "max-hold", e.Data["reason"])
				assert.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond)
				break
			}
			// (The events' reader may close the connection at the
			// stream's end already: the next subtest keeps it open.)
			closed := time.Now()
			events.Close()
			require.Eventually(t, func() bool { return !held(t, c, path) }, 5*time.Second, 5*time.Millisecond,
				"freed once the holder closed the stream, long before its 10 s TTL")
			t.Logf("free %v after the holder closed the stream", time.Since(closed).Round(time.Millisecond))
		})

		t.Run("max_hold_ms, stream left open", func(t *testing.T) {
			path := lockPath(apitest.Key(t))
			// A raw connection, which reads the end and never closes (an
			// HTTP client closes a Connection: close response's at its end).
			conn, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
			require.NoError(t, err)
			defer conn.Close()
			body := `{"ttl_ms":2000,"max_hold_ms":300}`
			_, err = fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
			require.NoError(t, err)
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			rd := bufio.NewReader(conn)
			var told time.Time
			for told.IsZero() {
				line, err := rd.ReadString('\n')
				require.NoError(t, err, "the ended event")
				if strings.HasPrefix(line, "event: ended") {
					data, err := rd.ReadString('\n')
					require.NoError(t, err)
					var end struct {
						ExpiresAt time.Time `json:"expires_at"`
					}
					require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &end))
					told = end.ExpiresAt
				}
			}
			// The gateway waits for the close a tenth of the TTL, at
			// least half a second (linger; closeWait), then leaves the lease to end
			// by itself: the holder that never closed may not have read
			// the end, and holds the key by everything else it heard.
			time.Sleep(800 * time.Millisecond)
			if time.Now().Before(told) {
				assert.True(t, held(t, c, path), "not freed while the holder that did not close may still hold it")
			}
			require.Eventually(t, func() bool { return !held(t, c, path) }, 5*time.Second, 10*time.Millisecond,
				"ends at its TTL")
			assert.False(t, time.Now().Before(told), "not freed before the expires_at the holder was last told")
		})

		t.Run("lock delay", func(t *testing.T) {
			path := lockPath(apitest.Key(t))
			events, resp := c.Hold(t, path, []byte(`{"ttl_ms":300,"lock_delay_ms":1000}`))
			require.Nil(t, resp)
			_, _ = nextEvent(t, events, 2*time.Second)
			gone := time.Now()
			events.Close()
			time.Sleep(500 * time.Millisecond) // past the hold's TTL
			assert.True(t, held(t, c, path), "kept for its lock delay after the client vanished")
			require.Eventually(t, func() bool { return !held(t, c, path) }, 2*time.Second, 10*time.Millisecond)
			assert.Less(t, time.Since(gone), 1500*time.Millisecond, "and not much longer")
		})

		t.Run("hold fields without a stream", func(t *testing.T) {
			r := c.Do(t, "PUT", lockPath(apitest.Key(t)), []byte(`{"max_hold_ms":1000}`), apitest.JSON...)
			require.Equal(t, http.StatusUnprocessableEntity, r.Status)
			assert.Contains(t, string(r.Body), "max_hold_ms")
		})
	})
}

// TestHoldLostBeforeExpiry: Redis paused past the lease's end; the stream
// says lost before the expires_at it last told, and another client gets the
// key only after that moment.
func TestHoldLostBeforeExpiry(t *testing.T) {
	srv := redistest.Start(t)
	g := apitest.Start(t, map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_URL": srv.URL(), "LOCKGW_BACKEND_TIMEOUT": "200ms"})
	c := apitest.NewClient(g.URL)
	path := lockPath(apitest.Key(t))
	events, resp := c.Hold(t, path, []byte(`{"ttl_ms":1000}`))
	require.Nil(t, resp)
	defer events.Close()
	acq, _ := nextEvent(t, events, 2*time.Second)
	lastExpiry, err := time.Parse(time.RFC3339Nano, acq.Data["expires_at"].(string))
	require.NoError(t, err)
	e, _ := nextEvent(t, events, 2*time.Second)
	require.Equal(t, "renewed", e.Name)
	lastExpiry, err = time.Parse(time.RFC3339Nano, e.Data["expires_at"].(string))
	require.NoError(t, err)

	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	for {
		e, ok := nextEvent(t, events, 3*time.Second)
		require.True(t, ok)
		if e.Name == "renewed" {
			lastExpiry, err = time.Parse(time.RFC3339Nano, e.Data["expires_at"].(string))
			require.NoError(t, err)
			continue
		}
		require.Equal(t, "lost", e.Name)
		assert.Equal(t, "backend-unavailable", e.Data["reason"])
		assert.True(t, e.At.Before(lastExpiry), "lost at %v, before the expires_at told (%v)", e.At.Format("15:04:05.000"), lastExpiry.Format("15:04:05.000"))
		break
	}
	time.Sleep(time.Until(lastExpiry) + 1200*time.Millisecond) // Redis expires it by its own clock, once resumed
	srv.Resume()
	resumed = true
	r := c.Do(t, "PUT", path, []byte(`{"ttl_ms":1000}`), apitest.JSON...)
	require.Equal(t, http.StatusCreated, r.Status, "the key is free once the lost lease ran out")
}

// TestHoldLockDelayNotRenewedAfterClose: a hold with lock_delay_ms whose
// client closes the stream before its first renewal is due keeps the
// key until the later of its last expires_at and the close + the lock
// delay, no longer: the renewal it had queued is dropped. Before, the
// renewal went out after the hold ended and kept the key a whole TTL more,
// held by nobody (found by review).
func TestHoldLockDelayNotRenewedAfterClose(t *testing.T) {
	srv := redistest.Start(t)
	g := apitest.Start(t, map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_URL": srv.URL()})
	c := apitest.NewClient(g.URL)
	path := lockPath(apitest.Key(t))
	const ttl = 3 * time.Second
	events, resp := c.Hold(t, path, []byte(`{"ttl_ms":3000,"lock_delay_ms":100}`))
	require.Nil(t, resp)
	acq, _ := nextEvent(t, events, 2*time.Second)
	require.Equal(t, "acquired", acq.Name)
	told, err := time.Parse(time.RFC3339Nano, acq.Data["expires_at"].(string))
	require.NoError(t, err)
	granted := told.Add(-ttl)
	// Close at once: the first renewal, queued for TTL/3 after the grant,
	// is a second away.
	events.Close()
	closed := time.Now()
	end := told // no renewal came: the grant's end, or close + lock delay if later
	if d := closed.Add(100 * time.Millisecond); d.After(end) {
		end = d
	}
	time.Sleep(time.Until(end.Add(400 * time.Millisecond)))
	r := c.Do(t, "GET", path, nil)
	require.NotEqual(t, http.StatusOK, r.Status,
		"closed at %v (lock delay 100ms, last expires_at %v): still held %v after that end: %s",
		closed.Sub(granted), told.Sub(granted), time.Since(end), r.Body)
}
