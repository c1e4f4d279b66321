package server_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
)

// TestForcedReleaseThroughAnotherGateway: a hold through gateway A whose
// lease an administrator releases by force through gateway B ends lost,
// reason forced, at A's next renewal, before the lease's end (the
// tombstone the forced release leaves: docs/safety.md, "Forced
// releases"); the key is free at once, for a higher fence. A release by
// the holder's token through B still ends the hold released.
func TestForcedReleaseThroughAnotherGateway(t *testing.T) {
	keys := adminKeysFile(t)
	both := func(t *testing.T, env map[string]string, fn func(t *testing.T, a, b *apitest.Gateway)) {
		env["LOCKGW_API_KEYS_FILE"] = keys
		fn(t, apitest.Start(t, env), apitest.Start(t, env))
	}
	run := func(t *testing.T, a, b *apitest.Gateway) {
		ca, cb := apitest.NewClient(a.URL), apitest.NewClient(b.URL)
		ops, dev := []string{"Authorization", "Bearer ops-key"}, []string{"Authorization", "Bearer dev-key"}
		for _, kind := range []string{"lock", "permit"} {
			t.Run(kind, func(t *testing.T) {
				path, body, force := lockPath("jobs/"+apitest.Key(t)), `{"ttl_ms":3000}`, "?force=true"
				if kind == "permit" {
					path, body = "/semaphores/jobs/"+apitest.Key(t), `{"limit":1,"ttl_ms":3000}`
				}
				hold := func() (*apitest.Events, int64, string, time.Time) {
					events, resp := ca.Hold(t, path, []byte(body), dev...)
					require.Nil(t, resp)
					acq, _ := nextEvent(t, events, 2*time.Second)
					require.Equal(t, "acquired", acq.Name)
					end, err := time.Parse(time.RFC3339Nano, acq.Data["expires_at"].(string))
					require.NoError(t, err)
					return events, int64(acq.Data["fence"].(float64)), acq.Data["token"].(string), end
				}

				// Forced through B.
				events, fence, _, end := hold()
				defer events.Close()
				f := force
				if kind == "permit" {
					f += "&fence=" + strconv.FormatInt(fence, 10)
				}
				require.Equal(t, http.StatusNoContent, cb.Do(t, "DELETE", path+f, nil, ops...).Status)
				e, ok := nextEvent(t, events, 5*time.Second)
				require.True(t, ok, "a final event before the stream closes")
				assert.Equal(t, "lost", e.Name, "the holder must stop")
				assert.Equal(t, "forced", e.Data["reason"], "through another gateway too")
				assert.EqualValues(t, fence, e.Data["fence"])
				assert.True(t, time.Now().Before(end), "before the lease's end (%s)", end)
				_, ok = nextEvent(t, events, 2*time.Second)
				assert.False(t, ok, "closed after the final event")

				// The key is free at once, for a higher fence: the
				// tombstone keeps nobody out.
				next := cb.Do(t, "PUT", path, []byte(body), append(apitest.JSON, dev...)...)
				require.Equal(t, http.StatusCreated, next.Status, string(next.Body))
				assert.Greater(t, fenceOf(t, next), fence)
				token := next.JSON(t)["token"].(string)
				require.Equal(t, http.StatusNoContent, cb.Do(t, "DELETE", path, nil, append(dev, "Lock-Token", token)...).Status)

				// Released by its own token through B: released, as before.
				events2, _, token2, _ := hold()
				defer events2.Close()
				require.Equal(t, http.StatusNoContent, cb.Do(t, "DELETE", path, nil, append(dev, "Lock-Token", token2)...).Status)
				e, ok = nextEvent(t, events2, 5*time.Second)
				require.True(t, ok)
				assert.Equal(t, "released", e.Name)
				assert.Equal(t, "released", e.Data["reason"])
			})
		}
	}
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		both(t, map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_URL": srv.URL()}, run)
	})
	t.Run("redlock", func(t *testing.T) {
		t.Parallel()
		_, env := redlockEnv(t, 5)
		both(t, env, run)
	})
}
