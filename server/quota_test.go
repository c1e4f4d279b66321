package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/server"
)

// twoGateways starts two gateways on one Redis with env added, as two
// replicas behind a load balancer would be.
func twoGateways(t *testing.T, env map[string]string) (*apitest.Client, *apitest.Client) {
	t.Helper()
	srv := redistest.Start(t)
	env["LOCKGW_BACKEND"] = "redis"
	env["LOCKGW_REDIS_URL"] = srv.URL()
	return apitest.NewClient(apitest.Start(t, env).URL), apitest.NewClient(apitest.Start(t, env).URL)
}

func put(t *testing.T, c *apitest.Client, path string, ttlMs int, headers ...string) *apitest.Response {
	t.Helper()
	body := fmt.Appendf(nil, `{"ttl_ms":%d}`, ttlMs)
	return c.Do(t, "PUT", path, body, append(headers, apitest.JSON...)...)
}

// requireQuotaExceeded checks a 429 quota-exceeded whose Retry-After is
// the time until the user's earliest lock expires.
func requireQuotaExceeded(t *testing.T, r *apitest.Response, retryAfter ...int) {
	t.Helper()
	require.Equal(t, http.StatusTooManyRequests, r.Status, "%s", r.Body)
	assert.Equal(t, "quota-exceeded", r.ProblemType(t))
	got, err := strconv.Atoi(r.Header.Get("Retry-After"))
	require.NoError(t, err)
	assert.Contains(t, retryAfter, got, "Retry-After")
}

// TestQuotaPerUserAcrossGateways: the cap on a user's live locks is exact
// across two gateways on one Redis, counted per API-key user: a lock taken
// through one gateway counts on the other, a same-token renewal is not a
// second lock, a release through the other gateway frees a place at once,
// and another user has a count of its own. Concurrent acquires through
// both stop exactly at the cap.
func TestQuotaPerUserAcrossGateways(t *testing.T) {
	a, b := twoGateways(t, map[string]string{
		"LOCKGW_MAX_LOCKS_PER_USER": "3",
		"LOCKGW_API_KEYS_FILE":      keysFile(t, `["*"]`),
	})
	teamA := []string{"Authorization", "Bearer a-key"}
	ops := []string{"Authorization", "Bearer ops-key"}
	key := lockPath(apitest.Key(t))

	var tokens []string
	for i, c := range []*apitest.Client{a, b, a} {
		r := put(t, c, fmt.Sprintf("%s/%d", key, i), 20000, teamA...)
		require.Equal(t, http.StatusCreated, r.Status, "lock %d: %s", i, r.Body)
		tokens = append(tokens, r.JSON(t)["token"].(string))
	}
	for _, c := range []*apitest.Client{a, b} {
		requireQuotaExceeded(t, put(t, c, key+"/3", 1000, teamA...), 19, 20)
		assert.Equal(t, http.StatusNotFound, c.Do(t, "GET", key+"/3", nil, ops...).Status, "a refused acquire takes nothing")
	}
	require.Equal(t, http.StatusCreated, put(t, b, key+"/ops", 1000, ops...).Status, "another user has its own count")

	r := put(t, b, key+"/0", 20000, append(teamA, "Lock-Token", tokens[0])...)
	require.Equal(t, http.StatusOK, r.Status, "a same-token renewal at the cap: %s", r.Body)

	require.Equal(t, http.StatusNoContent, b.Do(t, "DELETE", key+"/2", nil, append(teamA, "Lock-Token", tokens[2])...).Status)
	require.Equal(t, http.StatusCreated, put(t, a, key+"/3", 20000, teamA...).Status, "the release through the other gateway freed a place")
	requireQuotaExceeded(t, put(t, b, key+"/4", 20000, teamA...), 19, 20)

	// ops holds one; sixteen acquires at once, through both gateways:
	// exactly two more are granted.
	var wg sync.WaitGroup
	statuses := make([]int, 16)
	for i := range statuses {
		c := []*apitest.Client{a, b}[i%2]
		wg.Go(func() { statuses[i] = put(t, c, fmt.Sprintf("%s/ops-%d", key, i), 20000, ops...).Status })
	}
	wg.Wait()
	count := map[int]int{}
	for _, s := range statuses {
		count[s]++
	}
	assert.Equal(t, map[int]int{http.StatusCreated: 2, http.StatusTooManyRequests: 14}, count)
}

// TestQuotaPerClientAcrossGateways: without API keys a user is the client
// IP, as the rate limiter counts it (X-Forwarded-For read through trusted
// proxies only); an expired lock frees its place by itself; a client that
// cannot be identified is refused rather than counted against nobody.
func TestQuotaPerClientAcrossGateways(t *testing.T) {
	a, b := twoGateways(t, map[string]string{
		"LOCKGW_MAX_LOCKS_PER_USER": "2",
		"LOCKGW_TRUSTED_PROXIES":    "127.0.0.1/32",
	})
	key := lockPath(apitest.Key(t))
	client1 := []string{"X-Forwarded-For", "203.0.113.7"}
	client2 := []string{"X-Forwarded-For", "203.0.113.8"}

	// The first lock lives 2 s: long enough that the two requests after
	// it are answered before it ends on a loaded machine (300 ms was not,
	// and the third was granted in its place).
	require.Equal(t, http.StatusCreated, put(t, a, key+"/1", 2000, client1...).Status)
	sent2 := time.Now()
	require.Equal(t, http.StatusCreated, put(t, b, key+"/2", 20000, client1...).Status)
	answered2 := time.Now()
	requireQuotaExceeded(t, put(t, b, key+"/3", 20000, client1...), 1, 2)
	require.Equal(t, http.StatusCreated, put(t, a, key+"/other", 20000, client2...).Status, "another client")

	time.Sleep(2100 * time.Millisecond)
	require.Equal(t, http.StatusCreated, put(t, a, key+"/3", 20000, client1...).Status, "the expired lock freed its place")
	// Retry-After: until the user's earliest lock, /2, ends, which lies
	// 20 s after a moment between its PUT's send and its answer.
	sent4 := time.Now()
	r4 := put(t, a, key+"/4", 20000, client1...)
	answered4 := time.Now()
	var until2 []int
	for s := int(math.Ceil((sent2.Sub(answered4) + 20*time.Second).Seconds())); s <= int(math.Ceil((answered2.Sub(sent4) + 20*time.Second).Seconds())); s++ {
		until2 = append(until2, s)
	}
	requireQuotaExceeded(t, r4, until2...)

	r := put(t, a, key+"/5", 1000, "X-Forwarded-For", "not-an-address")
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	assert.Equal(t, "malformed-request", r.ProblemType(t))
}

// TestQuotaMemoryBackend: with the memory backend the per-user cap and the
// gateway's own cap (LOCKGW_MAX_LOCKS) are both exact; over the latter a
// PUT is 503 too-many-locks, with Retry-After until the earliest lock
// expires.
func TestQuotaMemoryBackend(t *testing.T) {
	g := apitest.Start(t, map[string]string{
		"LOCKGW_BACKEND":            "memory",
		"LOCKGW_MAX_LOCKS_PER_USER": "2",
		"LOCKGW_MAX_LOCKS":          "3",
		"LOCKGW_TRUSTED_PROXIES":    "127.0.0.1/32",
	})
	c := apitest.NewClient(g.URL)
	key := lockPath(apitest.Key(t))
	client1 := []string{"X-Forwarded-For", "203.0.113.7"}
	client2 := []string{"X-Forwarded-For", "203.0.113.8"}

	require.Equal(t, http.StatusCreated, put(t, c, key+"/1", 5000, client1...).Status)
	r := put(t, c, key+"/2", 20000, client1...)
	require.Equal(t, http.StatusCreated, r.Status)
	token := r.JSON(t)["token"].(string)
	requireQuotaExceeded(t, put(t, c, key+"/3", 20000, client1...), 5)
	require.Equal(t, http.StatusCreated, put(t, c, key+"/4", 20000, client2...).Status)

	r = put(t, c, key+"/5", 20000, client2...)
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	assert.Equal(t, "too-many-locks", r.ProblemType(t))
	assert.Equal(t, "5", r.Header.Get("Retry-After"), "until the earliest lock expires")
	assert.Equal(t, http.StatusNotFound, c.Do(t, "GET", key+"/5", nil).Status)

	require.Equal(t, http.StatusNoContent, c.Do(t, "DELETE", key+"/2", nil, "Lock-Token", token).Status)
	require.Equal(t, http.StatusCreated, put(t, c, key+"/5", 20000, client2...).Status, "a release freed a place")

	series, _ := scrape(t, c)
	assert.Equal(t, 1.0, series[`lockgw_acquire_duration_seconds_count{outcome="over_quota"}`])
	assert.Equal(t, 1.0, series[`lockgw_acquire_duration_seconds_count{outcome="full"}`])
}

// TestQuotaConfig: nonsense, and caps a backend cannot keep, stop the
// gateway at start-up.
func TestQuotaConfig(t *testing.T) {
	redlock := map[string]string{"LOCKGW_BACKEND": "redlock", "LOCKGW_REDLOCK_URLS": "redis://a:1,redis://b:1,redis://c:1"}
	with := func(env map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for k, v := range env {
			out[k] = v
		}
		return out
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"negative per-user cap", map[string]string{"LOCKGW_MAX_LOCKS_PER_USER": "-1"}, `LOCKGW_MAX_LOCKS_PER_USER: "-1"`},
		{"per-user cap on redlock", with(redlock, "LOCKGW_MAX_LOCKS_PER_USER", "100"), "redlock backend does not count locks per user"},
		{"no locks", map[string]string{"LOCKGW_MAX_LOCKS": "0"}, `LOCKGW_MAX_LOCKS: "0": want auto or a whole number`},
		{"global cap on redis", map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_MAX_LOCKS": "1000"}, "only the memory backend"},
		{"locks past the memory limit", map[string]string{"LOCKGW_MEMORY_LIMIT": "64MiB", "LOCKGW_MAX_LOCKS": "1000000"}, "more than half the memory limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := server.Run(ctx, nil, func(k string) string { return tc.env[k] }, io.Discard, io.Discard)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// BenchmarkGatewayLiveLock measures what a live lock costs a memory-backend
// gateway's heap (B/lock), counted against one of 100 users, the hold-time
// metric included: lockBytes in quota.go and docs/rate-limiting.md's Quotas come from
// it. Run with -benchtime=100000x; the figure is the heap after the locks
// less the heap before, over their number (the client's garbage collected).
func BenchmarkGatewayLiveLock(b *testing.B) {
	g := apitest.Start(b, map[string]string{
		"LOCKGW_BACKEND": "memory", "LOCKGW_TRUSTED_PROXIES": "127.0.0.1/32", "LOCKGW_MAX_LOCKS": "10000000",
		"LOCKGW_MAX_LOCKS_PER_USER": "10000000", "LOCKGW_LOG_LEVEL": "warn",
	})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	body := []byte(`{"ttl_ms":3600000,"owner":"worker-7"}`)
	before := liveHeap()
	b.ResetTimer()
	for i := range b.N {
		req, err := http.NewRequest("PUT", fmt.Sprintf("%s/locks/jobs/nightly-%08d", g.URL, i), bytes.NewReader(body))
		require.NoError(b, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("10.0.0.%d", i%100))
		resp, err := hc.Do(req)
		require.NoError(b, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(b, http.StatusCreated, resp.StatusCode)
	}
	b.StopTimer()
	hc.CloseIdleConnections()
	b.ReportMetric(float64(liveHeap()-before)/float64(b.N), "B/lock")
}

func liveHeap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
