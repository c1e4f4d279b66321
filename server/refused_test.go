package server_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
)

// TestFullRedis: a Redis out of memory (maxmemory 8mb, noeviction, full)
// refuses new locks with the documented 503, never a 500; /readyz says so,
// and so does /metrics. Holders can still extend and release. Once memory
// is back, so is the gateway.
func TestFullRedis(t *testing.T) {
	srv := redistest.Start(t)
	g := apitest.Start(t, map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_URL": srv.URL()})
	c := apitest.NewClient(g.URL)
	held := lockPath(apitest.Key(t))
	r := c.Do(t, "PUT", held, nil)
	require.Equal(t, http.StatusCreated, r.Status)
	token := r.JSON(t)["token"].(string)

	srv.Fill("8mb")
	fresh := lockPath(apitest.Key(t) + "/fresh")
	r = c.Do(t, "PUT", fresh, nil)
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	assert.Equal(t, "backend-refuses-writes", r.ProblemType(t))
	assert.Contains(t, r.Problem(t)["detail"], "out of memory")
	assert.Equal(t, "1", r.Header.Get("Retry-After"))

	r = c.Do(t, "GET", "/readyz", nil)
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	assert.Equal(t, "backend-refuses-writes", r.ProblemType(t))

	series, _ := scrape(t, c)
	assert.Equal(t, 1.0, series[`lockgw_backend_refusals_total{op="acquire",reason="oom"}`])

	require.Equal(t, http.StatusOK, c.Do(t, "PATCH", held, nil, "Lock-Token", token).Status, "an extend needs no memory")
	require.Equal(t, http.StatusNoContent, c.Do(t, "DELETE", held, nil, "Lock-Token", token).Status)

	require.NoError(t, srv.Client().ConfigSet(context.Background(), "maxmemory", "0").Err())
	require.Equal(t, http.StatusOK, c.Do(t, "GET", "/readyz", nil).Status)
	require.Equal(t, http.StatusCreated, c.Do(t, "PUT", fresh, nil).Status)
}
