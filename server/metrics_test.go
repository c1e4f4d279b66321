package server_test

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
)

// scrape reads /metrics into series → value ("lockgw_conflicts_total",
// `lockgw_lock_gone_total{op="extend"}`, …).
func scrape(t *testing.T, c *apitest.Client) (map[string]float64, string) {
	t.Helper()
	r := c.Do(t, "GET", "/metrics", nil)
	require.Equal(t, http.StatusOK, r.Status)
	series := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(r.Body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		series[line[:i]] = v
	}
	return series, string(r.Body)
}

// TestMetricsMatchWorkload drives a scripted workload over Redlock with
// rate limiting on, then checks each metric against it.
func TestMetricsMatchWorkload(t *testing.T) {
	nodes, env := redlockEnv(t, 3)
	env["LOCKGW_RATE_LIMIT_WINDOW"] = "10s"
	env["LOCKGW_RATE_LIMIT_ROUTES"] = "PUT /locks/limited/*"
	// Each decision below is counted as what it was; a check that runs
	// past the default 100 ms on a loaded machine is admitted without one
	// (fail-open), as the second gateway's was in a loaded make test run.
	env["LOCKGW_RATE_LIMIT_TIMEOUT"] = "5s"
	g := apitest.Start(t, env)
	c := apitest.NewClient(g.URL)
	var tokens []string

	// An acquire, a conflict, a wait that runs out, a release.
	r := c.Do(t, "PUT", "/locks/a", nil)
	require.Equal(t, http.StatusCreated, r.Status)
	tokenA := r.JSON(t)["token"].(string)
	tokens = append(tokens, tokenA)
	require.Equal(t, http.StatusConflict, c.Do(t, "PUT", "/locks/a", nil).Status)
	require.Equal(t, http.StatusConflict, c.Do(t, "PUT", "/locks/a", []byte(`{"wait_ms":100}`), apitest.JSON...).Status)
	time.Sleep(20 * time.Millisecond) // a measurable hold
	require.Equal(t, http.StatusNoContent, c.Do(t, "DELETE", "/locks/a", nil, "Lock-Token", tokenA).Status)

	// A lease that runs out before its holder extends or releases it.
	r = c.Do(t, "PUT", "/locks/b", []byte(`{"ttl_ms":50}`), apitest.JSON...)
	require.Equal(t, http.StatusCreated, r.Status)
	tokenB := r.JSON(t)["token"].(string)
	tokens = append(tokens, tokenB)
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, http.StatusNotFound, c.Do(t, "PATCH", "/locks/b", nil, "Lock-Token", tokenB).Status)
	require.Equal(t, http.StatusNotFound, c.Do(t, "DELETE", "/locks/b", nil, "Lock-Token", tokenB).Status)

	// Rate limiting: admitted; then refused from the cache (this gateway
	// knows the window it just granted), and, by another gateway that
	// must ask the store, refused by the store and then from its cache.
	r = c.Do(t, "PUT", "/locks/limited/x", nil)
	require.Equal(t, http.StatusCreated, r.Status)
	tokenX := r.JSON(t)["token"].(string)
	tokens = append(tokens, tokenX)
	require.Equal(t, http.StatusTooManyRequests, c.Do(t, "PUT", "/locks/limited/y", nil).Status)
	other := apitest.NewClient(apitest.Start(t, env).URL)
	require.Equal(t, http.StatusTooManyRequests, other.Do(t, "PUT", "/locks/limited/z", nil).Status)
	require.Equal(t, http.StatusTooManyRequests, other.Do(t, "PUT", "/locks/limited/z", nil).Status)

	// The backend fails: two of three nodes gone.
	nodes[0].Kill()
	nodes[1].Kill()
	require.Equal(t, http.StatusServiceUnavailable, c.Do(t, "PATCH", "/locks/limited/x", nil, "Lock-Token", tokenX).Status)

	m, text := scrape(t, c)
	assert.Equal(t, 2.0, m[`lockgw_acquire_duration_seconds_count{outcome="held"}`])
	assert.Equal(t, 3.0, m[`lockgw_acquire_duration_seconds_count{outcome="acquired"}`])
	assert.Equal(t, 2.0, m["lockgw_conflicts_total"])
	assert.Equal(t, 1.0, m[`lockgw_wait_seconds_count{outcome="timed_out"}`])
	assert.GreaterOrEqual(t, m[`lockgw_wait_seconds_sum{outcome="timed_out"}`], 0.1)
	assert.Equal(t, 1.0, m["lockgw_hold_seconds_count"], "one release of a lease this gateway granted")
	assert.GreaterOrEqual(t, m["lockgw_hold_seconds_sum"], 0.02)
	assert.Equal(t, 1.0, m[`lockgw_lock_gone_total{op="extend"}`])
	assert.Equal(t, 1.0, m[`lockgw_lock_gone_total{op="release"}`])
	assert.Equal(t, 1.0, m[`lockgw_ratelimit_decisions_total{decision="admitted"}`])
	assert.Zero(t, m[`lockgw_ratelimit_decisions_total{decision="refused"}`])
	assert.Equal(t, 1.0, m[`lockgw_ratelimit_decisions_total{decision="refused_cached"}`])
	om, _ := scrape(t, other)
	assert.Equal(t, 1.0, om[`lockgw_ratelimit_decisions_total{decision="refused"}`])
	assert.Equal(t, 1.0, om[`lockgw_ratelimit_decisions_total{decision="refused_cached"}`])
	assert.Equal(t, 1.0, m[`lockgw_backend_errors_total{op="extend"}`])

	// Votes: every node voted in every acquire round.
	var granted, held float64
	for _, n := range nodes {
		granted += m[`lockgw_redlock_votes_total{node="`+n.Addr()+`",vote="granted"}`]
		held += m[`lockgw_redlock_votes_total{node="`+n.Addr()+`",vote="held"}`]
	}
	// Grants: a, b, limited/x and its rate-limit window, on 3 nodes each.
	assert.GreaterOrEqual(t, granted, 12.0)
	// Held: the conflict and at least one round of the wait, on 3 nodes each.
	assert.GreaterOrEqual(t, held, 6.0)

	assert.Positive(t, m[`lockgw_http_request_duration_seconds_count{method="PUT",route="/locks/*",status="201"}`])
	assert.Contains(t, text, "go_goroutines")
	for _, secret := range append(tokens, "limited/x", "/locks/a") {
		assert.NotContains(t, text, secret, "labels never carry keys or tokens")
	}
}

// A client cannot grow the metrics by inventing methods.
func TestMetricsMethodLabelIsBounded(t *testing.T) {
	c := apitest.NewClient(apitest.Start(t, nil).URL)
	for _, m := range []string{"FOO", "BAR", "BAZ"} {
		c.Do(t, m, "/locks/k", nil)
	}
	series, text := scrape(t, c)
	assert.NotContains(t, text, "FOO")
	var other float64
	for k, v := range series {
		if strings.HasPrefix(k, `lockgw_http_request_duration_seconds_count{method="other",`) {
			other += v
		}
	}
	assert.Equal(t, 3.0, other)
}

// TestMetricsOnTheirOwnAddress: with LOCKGW_METRICS_ADDR, /metrics is served
// there and only there, so a deployment with API keys can keep it on a
// private interface (it asks for no key).
func TestMetricsOnTheirOwnAddress(t *testing.T) {
	g := apitest.Start(t, map[string]string{"LOCKGW_METRICS_ADDR": "127.0.0.1:0"})
	var addr string
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`"addr":"([^"]+)","time":"[^"]+","message":"metrics listening"`).FindStringSubmatch(g.Logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, 5*time.Second, 10*time.Millisecond, "the log names the metrics address: %s", g.Logs)

	c := apitest.NewClient(g.URL)
	require.Equal(t, http.StatusCreated, c.Do(t, "PUT", "/locks/"+apitest.Key(t), nil).Status)
	r := c.Do(t, "GET", "/metrics", nil)
	assert.Equal(t, http.StatusNotFound, r.Status, "the API's listener no longer serves /metrics")

	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(body), `lockgw_acquire_duration_seconds_count{outcome="acquired"} 1`)

	resp, err = http.Get("http://" + addr + "/locks/x")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "the metrics address serves nothing else")
}

// TestPermitMetricsMatchWorkload: each way a permit operation ends is its
// own series, as the handlers report it (Observer.PermitAcquired,
// PermitOp), on the default memory backend; no series names a key or a
// token.
func TestPermitMetricsMatchWorkload(t *testing.T) {
	g := apitest.Start(t, map[string]string{})
	c := apitest.NewClient(g.URL)
	path := "/semaphores/secret/key"
	r := c.Do(t, "PUT", path, []byte(`{"limit":1}`), apitest.JSON...)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	a := r.JSON(t)["token"].(string)
	require.Equal(t, http.StatusOK, c.Do(t, "PUT", path, []byte(`{"limit":1}`), append(apitest.JSON, "Lock-Token", a)...).Status)
	b := lockstore.NewToken() // holds nothing
	require.Equal(t, http.StatusConflict, c.Do(t, "PUT", path, []byte(`{"limit":1}`), apitest.JSON...).Status)
	require.Equal(t, http.StatusConflict, c.Do(t, "PUT", path, []byte(`{"limit":2}`), apitest.JSON...).Status)
	require.Equal(t, http.StatusOK, c.Do(t, "PATCH", path, nil, "Lock-Token", a).Status)
	require.Equal(t, http.StatusPreconditionFailed, c.Do(t, "DELETE", path, nil, "Lock-Token", b).Status)
	require.Equal(t, http.StatusNoContent, c.Do(t, "DELETE", path, nil, "Lock-Token", a).Status)
	require.Equal(t, http.StatusNotFound, c.Do(t, "DELETE", path, nil, "Lock-Token", a).Status)
	// A waiter whose client gives up: abandoned.
	require.Equal(t, http.StatusCreated, c.Do(t, "PUT", "/semaphores/secret/other", []byte(`{"limit":1}`), apitest.JSON...).Status)
	impatient := &apitest.Client{Base: g.URL, HTTP: &http.Client{Timeout: 200 * time.Millisecond}}
	_, err := impatient.Try(t, "PUT", "/semaphores/secret/other", []byte(`{"limit":1,"wait_ms":5000}`), apitest.JSON...)
	require.Error(t, err, "the client gave up before the wait ended")

	var m map[string]float64
	var text string
	require.Eventually(t, func() bool { // the abandoned acquire is counted when its handler returns
		m, text = scrape(t, c)
		return m[`lockgw_permit_acquire_duration_seconds_count{outcome="abandoned"}`] == 1
	}, 5*time.Second, 20*time.Millisecond)
	for series, want := range map[string]float64{
		`lockgw_permit_acquire_duration_seconds_count{outcome="acquired"}`:       2,
		`lockgw_permit_acquire_duration_seconds_count{outcome="renewed"}`:        1,
		`lockgw_permit_acquire_duration_seconds_count{outcome="full"}`:           1,
		`lockgw_permit_acquire_duration_seconds_count{outcome="limit_mismatch"}`: 1,
		`lockgw_permit_ops_total{op="extend",outcome="done"}`:                    1,
		`lockgw_permit_ops_total{op="release",outcome="done"}`:                   1,
		`lockgw_permit_ops_total{op="release",outcome="gone"}`:                   1,
		`lockgw_permit_ops_total{op="release",outcome="mismatch"}`:               1,
	} {
		assert.Equal(t, want, m[series], series)
	}
	assert.NotContains(t, text, "secret")
	assert.NotContains(t, text, a)
}
