package server_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
)

// TestHoldAtLeast: hold_at_least_ms keeps the key after a DELETE, and after
// the end of a hold, until that long after the grant (the cron recipe:
// docs/clients.md), on every backend; the DELETE answers 204 as always.
func TestHoldAtLeast(t *testing.T) {
	backends(t, func(t *testing.T, g *apitest.Gateway) {
		c := apitest.NewClient(g.URL)
		const atLeast = 1200 * time.Millisecond

		t.Run("release", func(t *testing.T) {
			path := lockPath(apitest.Key(t))
			start := time.Now()
			r := c.Do(t, "PUT", path, []byte(`{"ttl_ms":30000,"hold_at_least_ms":1200,"owner":"cron"}`), apitest.JSON...)
			require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
			var lease struct {
				Token string `json:"token"`
				Fence int64  `json:"fence"`
			}
			require.NoError(t, json.Unmarshal(r.Body, &lease))
			require.Equal(t, http.StatusNoContent, c.Do(t, "DELETE", path, nil, "Lock-Token", lease.Token).Status)

			g := c.Do(t, "GET", path, nil)
			require.Equal(t, http.StatusOK, g.Status, "held until hold_at_least_ms after the grant")
			assert.Contains(t, string(g.Body), `"owner":"cron"`)
			assert.Equal(t, http.StatusNotFound, c.Do(t, "DELETE", path, nil, "Lock-Token", lease.Token).Status, "a retried DELETE")
			assert.Equal(t, http.StatusNotFound, c.Do(t, "PATCH", path, nil, "Lock-Token", lease.Token).Status, "no extend brings it back")
			other := c.Do(t, "PUT", path, nil)
			// The grant's hold_at_least_ms ends no sooner than atLeast
			// after start: an answer back before then was refused, or the
			// key was taken too soon. (On a machine so loaded that the
			// requests above took longer, the key may be free already.)
			if time.Since(start) < atLeast {
				require.Equal(t, http.StatusConflict, other.Status, "nobody takes it before then")
				assert.NotEmpty(t, other.Header.Get("Retry-After"))
			} else {
				t.Logf("the other PUT was answered %v after the first was sent, past hold_at_least_ms: not judged", time.Since(start))
				if other.Status == http.StatusCreated {
					return // free once the time has passed
				}
			}

			time.Sleep(time.Until(start.Add(atLeast)))
			require.Eventually(t, func() bool { return c.Do(t, "PUT", path, nil).Status == http.StatusCreated },
				2*time.Second, 20*time.Millisecond, "free once the time has passed")
		})

		t.Run("end of a hold", func(t *testing.T) {
			path := lockPath(apitest.Key(t))
			start := time.Now()
			events, resp := c.Hold(t, path, []byte(`{"ttl_ms":1000,"hold_at_least_ms":1200}`))
			require.Nil(t, resp)
			_, _ = nextEvent(t, events, 2*time.Second) // acquired
			events.Close()                             // the job ended at once
			time.Sleep(300 * time.Millisecond)         // the gateway saw the stream close
			if time.Since(start) < atLeast-100*time.Millisecond {
				assert.True(t, held(t, c, path), "kept until hold_at_least_ms after the grant")
			}
			require.Eventually(t, func() bool { return !held(t, c, path) }, 3*time.Second, 20*time.Millisecond)
			assert.GreaterOrEqual(t, time.Since(start), atLeast-50*time.Millisecond, "and not released sooner")
		})

		t.Run("bounds", func(t *testing.T) {
			r := c.Do(t, "PUT", lockPath(apitest.Key(t)), []byte(`{"hold_at_least_ms":0}`), apitest.JSON...)
			require.Equal(t, http.StatusUnprocessableEntity, r.Status)
			assert.Contains(t, string(r.Body), "hold_at_least_ms")
		})
	})
}
