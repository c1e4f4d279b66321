package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
)

func semPath(key string) string { return "/semaphores/" + key }

// TestSemaphoreWalkthrough is every answer of /semaphores/{key}, on each
// backend, each response checked against openapi.yaml by the client.
func TestSemaphoreWalkthrough(t *testing.T) {
	backends(t, func(t *testing.T, g *apitest.Gateway) {
		c := apitest.NewClient(g.URL)
		key := apitest.Key(t)
		path := semPath(key)

		r := c.Do(t, "PUT", path, []byte(`{"limit":2,"ttl_ms":30000,"owner":"export-1"}`), apitest.JSON...)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		first := r.JSON(t)
		assert.Equal(t, key, first["key"])
		assert.EqualValues(t, 2, first["limit"])
		assert.EqualValues(t, 30000, first["ttl_ms"])
		assert.Equal(t, "export-1", first["owner"])
		assert.Equal(t, path, r.Header.Get("Location"))
		assert.Equal(t, `"`+first["token"].(string)+`"`, r.Header.Get("ETag"))

		r = c.Do(t, "PUT", path, []byte(`{"limit":2,"ttl_ms":30000,"owner":"export-2"}`), apitest.JSON...)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		second := r.JSON(t)
		assert.Greater(t, second["fence"].(float64), first["fence"].(float64))

		r = c.Do(t, "PUT", path, []byte(`{"limit":2}`), apitest.JSON...)
		require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
		assert.Equal(t, "semaphore-full", r.ProblemType(t))
		assert.NotEmpty(t, r.Header.Get("Retry-After"))

		r = c.Do(t, "PUT", path, []byte(`{"limit":3}`), apitest.JSON...)
		require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
		assert.Equal(t, "limit-mismatch", r.ProblemType(t))

		// A retry with the same token re-grants the same permit.
		r = c.Do(t, "PUT", path, []byte(`{"limit":2,"ttl_ms":20000}`), append(apitest.JSON, "Lock-Token", first["token"].(string))...)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		assert.Equal(t, first["fence"], r.JSON(t)["fence"])

		r = c.Do(t, "GET", path, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		st := r.JSON(t)
		assert.EqualValues(t, 2, st["limit"])
		assert.EqualValues(t, 2, st["held"])
		holders := st["holders"].([]any)
		require.Len(t, holders, 2)
		assert.Equal(t, first["fence"], holders[0].(map[string]any)["fence"])
		assert.NotContains(t, string(r.Body), first["token"].(string))
		assert.NotContains(t, string(r.Body), second["token"].(string))

		r = c.Do(t, "PATCH", path, []byte(`{"ttl_ms":60000}`), append(apitest.JSON, "If-Match", `"`+second["token"].(string)+`"`)...)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		assert.EqualValues(t, 60000, r.JSON(t)["ttl_ms"])
		assert.EqualValues(t, 2, r.JSON(t)["limit"])

		r = c.Do(t, "PATCH", path, nil)
		assert.Equal(t, http.StatusPreconditionRequired, r.Status)
		r = c.Do(t, "PATCH", path, nil, "Lock-Token", strings.Repeat("x", 22))
		assert.Equal(t, http.StatusPreconditionFailed, r.Status)
		r = c.Do(t, "DELETE", path, nil, "Lock-Token", strings.Repeat("x", 22))
		assert.Equal(t, http.StatusPreconditionFailed, r.Status)

		for _, p := range []map[string]any{first, second} {
			releasePermit(t, c, path, p["token"].(string), time.Now().Add(20*time.Second))
		}
		r = c.Do(t, "GET", path, nil)
		assert.Equal(t, http.StatusNotFound, r.Status)
		r = c.Do(t, "PATCH", path, nil, "Lock-Token", first["token"].(string))
		assert.Equal(t, http.StatusNotFound, r.Status)
		r = c.Do(t, "DELETE", path, nil, "Lock-Token", first["token"].(string))
		assert.Equal(t, http.StatusNotFound, r.Status)

		// Once free, the key takes another limit.
		r = c.Do(t, "PUT", path, []byte(`{"limit":3}`), apitest.JSON...)
		assert.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)

		for _, body := range []string{`{}`, `{"limit":0}`, `{"limit":10001}`, `{"limit":2,"ttl_ms":5}`} {
			r = c.Do(t, "PUT", semPath(key+"x"), []byte(body), apitest.JSON...)
			assert.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", body, r.Body)
		}
		r = c.Do(t, "PUT", semPath(key+"x"), []byte(`{"limit":2,"slots":1}`), apitest.JSON...)
		assert.Equal(t, http.StatusBadRequest, r.Status, "unknown field")
	})
}

// TestSemaphoreWaitWithPrefer: a PUT with Prefer: wait gets the permit a
// release frees.
func TestSemaphoreWaitWithPrefer(t *testing.T) {
	backends(t, func(t *testing.T, g *apitest.Gateway) {
		c := apitest.NewClient(g.URL)
		path := semPath(apitest.Key(t))
		r := c.Do(t, "PUT", path, []byte(`{"limit":1}`), apitest.JSON...)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		token := r.JSON(t)["token"].(string)
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() {
			time.Sleep(200 * time.Millisecond)
			c.Do(t, "DELETE", path, nil, "Lock-Token", token)
		})
		r = c.Do(t, "PUT", path, []byte(`{"limit":1}`), append(apitest.JSON, "Prefer", "wait=5")...)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		assert.Equal(t, "wait=5", r.Header.Get("Preference-Applied"))
	})
}

// TestSemaphoreLimitAcrossGateways: clients of two gateways on one Redis
// (and on one set of Redlock nodes) take permits of a limit-3 semaphore,
// waiting when it is full, and count themselves between the 201 and the
// DELETE: never more than 3 at once, and every fence distinct.
func TestSemaphoreLimitAcrossGateways(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		env := map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_URL": srv.URL()}
		semContend(t, apitest.Start(t, env), apitest.Start(t, env))
	})
	t.Run("redlock", func(t *testing.T) {
		t.Parallel()
		_, env := redlockEnv(t, 5)
		semContend(t, apitest.Start(t, env), apitest.Start(t, env))
	})
}

// releasePermit DELETEs a permit as a client would: a 503's outcome is
// unknown (the release may have landed), so it is asked again until
// deadline. It asserts the permit was released: 204, or after a retry
// whose first try released it, the answers for a token that holds none
// (404 when nobody holds a permit, 412 when others do). It returns how
// many 503s it retried.
func releasePermit(t *testing.T, c *apitest.Client, path, token string, deadline time.Time) int {
	t.Helper()
	retries := 0
	for {
		r := c.Do(t, "DELETE", path, nil, "Lock-Token", token)
		if r.Status == http.StatusServiceUnavailable && time.Now().Before(deadline) {
			retries++
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if retries == 0 || (r.Status != http.StatusNotFound && r.Status != http.StatusPreconditionFailed) {
			assert.Equal(t, http.StatusNoContent, r.Status, "after %d retried 503s: %s", retries, r.Body)
		}
		return retries
	}
}

func semContend(t *testing.T, gateways ...*apitest.Gateway) {
	const limit, clients, rounds = 3, 12, 5
	path := semPath(apitest.Key(t))
	var holders, most, unavailable atomic.Int32
	var mu sync.Mutex
	fences := make(map[float64]bool)
	var wg sync.WaitGroup
	for i := range clients {
		c := apitest.NewClient(gateways[i%len(gateways)].URL)
		wg.Go(func() {
			// A round answered 503 is asked again, as a client would, for
			// up to a minute: under make test's load a third of the rounds
			// were, and too few grants were left to judge.
			deadline := time.Now().Add(time.Minute)
			for done := 0; done < rounds && time.Now().Before(deadline); {
				r := c.Do(t, "PUT", path, []byte(fmt.Sprintf(`{"limit":%d,"ttl_ms":10000,"wait_ms":20000}`, limit)), apitest.JSON...)
				if r.Status == http.StatusServiceUnavailable {
					unavailable.Add(1)
					time.Sleep(50 * time.Millisecond)
					continue
				}
				done++
				if !assert.Equal(t, http.StatusCreated, r.Status, "%s", r.Body) {
					return
				}
				p := r.JSON(t)
				n := holders.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				mu.Lock()
				assert.False(t, fences[p["fence"].(float64)], "fence handed out twice")
				fences[p["fence"].(float64)] = true
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
				holders.Add(-1)
				// A release answered 503 is asked again too: its outcome
				// is unknown, so a retry whose first try released the
				// permit is answered as for a token that holds none: 404
				// when nobody holds one, 412 when others do.
				retries := releasePermit(t, c, path, p["token"].(string), deadline)
				unavailable.Add(int32(retries))
			}
		})
	}
	wg.Wait()
	t.Logf("%d grants, at most %d holders at once, %d unavailable", len(fences), most.Load(), unavailable.Load())
	assert.LessOrEqual(t, most.Load(), int32(limit), "more holders than the limit")
	assert.Greater(t, most.Load(), int32(1), "permits were held concurrently")
	assert.GreaterOrEqual(t, len(fences), clients*rounds/2, "too few grants to prove anything")
}

// TestSemaphoreAPIKeyScopes: an API key's prefixes allow semaphore keys as
// they allow lock keys, and a semaphore needs a key at all.
func TestSemaphoreAPIKeyScopes(t *testing.T) {
	g := apitest.Start(t, map[string]string{"LOCKGW_API_KEYS_FILE": keysFile(t, `["teamA/"]`)})
	c := apitest.NewClient(g.URL)
	body := []byte(`{"limit":2}`)
	for _, tc := range []struct {
		key, path string
		status    int
	}{
		{"a-key", "/semaphores/teamA/job", http.StatusCreated},
		{"a-key", "/semaphores/teamB/job", http.StatusForbidden},
		{"ops-key", "/semaphores/teamB/job", http.StatusCreated},
		{"", "/semaphores/teamA/job", http.StatusUnauthorized},
	} {
		headers := apitest.JSON
		if tc.key != "" {
			headers = append(headers, "Authorization", "Bearer "+tc.key)
		}
		r := c.Do(t, "PUT", tc.path, body, headers...)
		assert.Equal(t, tc.status, r.Status, "%s on %s: %s", tc.key, tc.path, r.Body)
	}
}

// TestSemaphoreBadRequests: the lock endpoints' refusals, on /semaphores.
func TestSemaphoreBadRequests(t *testing.T) {
	g := apitest.Start(t, nil)
	c := apitest.NewClient(g.URL)
	path := semPath(apitest.Key(t))
	for _, tc := range []struct {
		method, path, body string
		headers            []string
		status             int
	}{
		{"PUT", path, `{"limit":2}`, []string{"If-Match", `"` + strings.Repeat("a", 22) + `"`}, http.StatusBadRequest},
		{"PUT", path, `{"limit":"2"}`, nil, http.StatusBadRequest},
		{"PUT", path, `{"limit":2,"limit":3}`, nil, http.StatusBadRequest},
		{"PUT", path, `{"limit":2}`, []string{"Prefer", "wait=soon"}, http.StatusBadRequest},
		{"PUT", path, `{"limit":2}`, []string{"Lock-Token", "short"}, http.StatusBadRequest},
		{"PUT", "/semaphores/a//b", `{"limit":2}`, nil, http.StatusBadRequest},
		{"PATCH", path, `{"limit":2}`, []string{"Lock-Token", strings.Repeat("a", 22)}, http.StatusBadRequest},
		{"PUT", path, `{"limit":2,"wait_ms":-1}`, nil, http.StatusUnprocessableEntity},
		{"DELETE", path, ``, nil, http.StatusPreconditionRequired},
	} {
		headers := append([]string{"Content-Type", "application/json"}, tc.headers...)
		var body []byte
		if tc.body != "" {
			body = []byte(tc.body)
		}
		r := c.Do(t, tc.method, tc.path, body, headers...)
		assert.Equal(t, tc.status, r.Status, "%s %s %s %v: %s", tc.method, tc.path, tc.body, tc.headers, r.Body)
	}
}
