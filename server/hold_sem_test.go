package server_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
)

// TestHoldPermit: a permit held by a stream outlives many TTLs, counts
// against the limit all along, ends released on the holder's DELETE, and a
// permit whose client closed the stream is given back at once.
func TestHoldPermit(t *testing.T) {
	backends(t, func(t *testing.T, g *apitest.Gateway) {
		c := apitest.NewClient(g.URL)
		path := semPath(apitest.Key(t))
		// A TTL of 1.5 s: renewed every half second, so a renewal late by a
		// second on a loaded machine still lands (with 600 ms, a loaded CI
		// series saw the lease lost, correctly, to a starved gateway).
		events, resp := c.Hold(t, path, []byte(`{"limit":1,"ttl_ms":1500,"owner":"exporter"}`))
		require.Nil(t, resp)
		acq, _ := nextEvent(t, events, 2*time.Second)
		require.Equal(t, "acquired", acq.Name)
		token := acq.Data["token"].(string)
		assert.EqualValues(t, 1, acq.Data["limit"])
		renewals := 0
		for deadline := time.Now().Add(4600 * time.Millisecond); time.Now().Before(deadline); { // over three TTLs
			e, ok := nextEvent(t, events, 2*time.Second)
			require.True(t, ok, "the stream stays open")
			require.Equal(t, "renewed", e.Name, "%v", e.Data)
			assert.Equal(t, acq.Data["fence"], e.Data["fence"])
			renewals++
		}
		assert.GreaterOrEqual(t, renewals, 5, "renewed about every third of the TTL")
		full := c.Do(t, "PUT", path, []byte(`{"limit":1}`), apitest.JSON...)
		require.Equal(t, http.StatusConflict, full.Status, "the one permit held all along")

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

		events, resp = c.Hold(t, path, []byte(`{"limit":1,"ttl_ms":5000,"max_hold_ms":60000}`))
		require.Nil(t, resp)
		acq, _ = nextEvent(t, events, 2*time.Second)
		require.Equal(t, "acquired", acq.Name)
		closed := time.Now()
		events.Close()
		require.Eventually(t, func() bool { return c.Do(t, "GET", path, nil).Status == http.StatusNotFound }, 2*time.Second, 5*time.Millisecond,
			"the permit is given back once the client went away")
		assert.Less(t, time.Since(closed), time.Second, "at once, well before its 5 s TTL could end")

		r := c.Do(t, "PUT", path, []byte(`{"limit":1,"lock_delay_ms":10}`), apitest.JSON...)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "a hold's fields without a stream")
	})
}
