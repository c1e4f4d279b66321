package ratelimit_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
)

func redisEnv(srv *redistest.Server, extra ...string) map[string]string {
	env := map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_URL": srv.URL()}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	return env
}

// exactEnv is redisEnv for a test that counts on every check's answer (a
// refusal, the headers a check sends): failing
// closed, with a roomy deadline. The default fails open after a short one,
// a policy that trades exactness for availability (TestFailOpenAndClosed):
// on a loaded test machine a slow store must show up as a 503, not as a
// silent admission without headers (TestForgedHeadersStillLimited got a
// 201 so in make test, TestShadowNeverRefuses no RateLimit-Policy).
func exactEnv(srv *redistest.Server, extra ...string) map[string]string {
	return redisEnv(srv, append([]string{"LOCKGW_RATE_LIMIT_FAIL", "closed", "LOCKGW_RATE_LIMIT_TIMEOUT", "2s"}, extra...)...)
}

// TestExactAcrossReplicas: four gateways share one Redis; in each of 20
// bursts, 25 concurrent requests per gateway race for one user's window.
// Each burst admits exactly one request (unless the burst itself outlasted
// the window, when a second is legitimate), and no two admissions are ever
// closer than the window.
func TestExactAcrossReplicas(t *testing.T) {
	t.Parallel()
	const (
		window   = 500 * time.Millisecond
		bursts   = 20
		perProxy = 25
		spacing  = 700 * time.Millisecond // > window, so every burst opens a new window
	)
	srv := redistest.Start(t)
	var clients []*apitest.Client
	var gateways []*apitest.Gateway
	for range 4 {
		g := apitest.Start(t, exactEnv(srv, "LOCKGW_RATE_LIMIT_WINDOW", window.String(),
			"LOCKGW_USER_HEADER", "X-User", "LOCKGW_TRUSTED_PROXIES", "127.0.0.1/32"))
		gateways = append(gateways, g)
		c := apitest.NewClient(g.URL)
		c.HTTP.Transport = &http.Transport{MaxIdleConnsPerHost: perProxy}
		clients = append(clients, c)
	}

	type admission struct{ sent, got time.Time }
	var admissions []admission
	start := time.Now()
	for b := range bursts {
		time.Sleep(time.Until(start.Add(time.Duration(b) * spacing)))
		var mu sync.Mutex
		var wg sync.WaitGroup
		admitted, refused := 0, 0
		burstStart := time.Now()
		for _, c := range clients {
			for range perProxy {
				wg.Go(func() {
					sent := time.Now()
					r := c.Do(t, "GET", "/ratelimit/check", nil, "X-User", "alice")
					got := time.Now()
					mu.Lock()
					defer mu.Unlock()
					switch r.Status {
					case http.StatusOK:
						admitted++
						admissions = append(admissions, admission{sent, got})
					case http.StatusTooManyRequests:
						refused++
					default:
						t.Errorf("status %d: %s", r.Status, r.Body)
					}
				})
			}
		}
		wg.Wait()
		took := time.Since(burstStart)
		if admitted > 1 {
			for _, g := range gateways {
				t.Logf("gateway log tail: %s", lastLines(g.Logs.String(), 3))
			}
		}
		require.Equal(t, 4*perProxy, admitted+refused)
		// The window of the last admission began no later than its answer
		// arrived; once that plus the window has passed before this burst
		// began, someone in it must be admitted. (A burst slowed down by a
		// loaded machine can be admitted late, and the next one may then
		// meet its window, rightly refused.)
		var lastGot time.Time // the latest answer of an earlier burst's admission
		for _, a := range admissions[:len(admissions)-admitted] {
			if a.got.After(lastGot) {
				lastGot = a.got
			}
		}
		inLastWindow := !lastGot.IsZero() && !burstStart.After(lastGot.Add(window))
		if !inLastWindow {
			require.GreaterOrEqual(t, admitted, 1, "burst %d admitted nobody", b)
		} else if admitted == 0 {
			t.Logf("burst %d admitted nobody: it began %v after the last admission's answer, inside its window", b, burstStart.Sub(lastGot))
		}
		switch {
		case took < window && inLastWindow:
			// Admitted once the last window ended, or not at all (it may
			// not have ended before the burst did): never twice.
			require.LessOrEqual(t, admitted, 1, "burst %d (%v): at most one admission", b, took)
		case took < window:
			require.Equal(t, 1, admitted, "burst %d (%v): exactly one admission", b, took)
		default:
			t.Logf("burst %d took %v, longer than the window: %d admissions", b, took, admitted)
		}
	}
	// Redis started each admission's window between our send of it and
	// our receipt of its answer, so for two admissions, whichever came
	// first, their windows began at most max(got(j) - sent(i), got(i) -
	// sent(j)) apart: if even that is below the window, two admissions were
	// too close. (Both orders count: admissions is in the order their
	// goroutines took the mutex, which a loaded machine can make differ
	// from the order Redis took them in.)
	for i := range admissions {
		for j := i + 1; j < len(admissions); j++ {
			a, b := admissions[i], admissions[j]
			apart := max(b.got.Sub(a.sent), a.got.Sub(b.sent))
			assert.GreaterOrEqual(t, apart, window, "admissions %d and %d: their windows began at most %v apart", i, j, apart)
		}
	}
	t.Logf("%d admissions in %d bursts of %d requests over 4 replicas", len(admissions), bursts, 4*perProxy)
}

// TestForgedHeadersStillLimited: a client rotating X-Forwarded-For and the
// user header, from an address that is not a trusted proxy, is one user.
func TestForgedHeadersStillLimited(t *testing.T) {
	srv := redistest.Start(t)
	g := apitest.Start(t, exactEnv(srv, "LOCKGW_RATE_LIMIT_WINDOW", "10s",
		"LOCKGW_USER_HEADER", "X-User", "LOCKGW_TRUSTED_PROXIES", "10.0.0.0/8"))
	c := apitest.NewClient(g.URL)
	r := c.Do(t, "PUT", "/locks/"+apitest.Key(t), nil)
	require.Equal(t, http.StatusCreated, r.Status)
	for i := range 20 {
		fake := "198.51.100." + strconv.Itoa(i)
		r := c.Do(t, "PUT", "/locks/"+apitest.Key(t), nil, "X-Forwarded-For", fake, "X-User", "user-"+strconv.Itoa(i))
		require.Equal(t, http.StatusTooManyRequests, r.Status, "forged identity %d got through", i)
		assert.Equal(t, "rate-limited", r.ProblemType(t))
	}
}

// TestRefusalCacheSparesRedis: after the first refusal, a flood from the
// refused user costs Redis nothing.
func TestRefusalCacheSparesRedis(t *testing.T) {
	srv := redistest.Start(t)
	g := apitest.Start(t, exactEnv(srv, "LOCKGW_RATE_LIMIT_WINDOW", "30s"))
	c := apitest.NewClient(g.URL)
	ctx := context.Background()

	// The gateway pings Redis once as it starts (a SET of lockgw:ready),
	// after it serves /healthz: under load that SET came during the flood
	// and was counted as the flood's. Count from after it.
	require.Eventually(t, func() bool { return srv.Client().Exists(ctx, "lockgw:ready").Val() == 1 },
		10*time.Second, 10*time.Millisecond, "the gateway's start-up ping")
	require.Equal(t, http.StatusOK, c.Do(t, "GET", "/ratelimit/check", nil).Status)
	before, err := srv.CommandCalls(ctx)
	require.NoError(t, err)
	for range 200 {
		require.Equal(t, http.StatusTooManyRequests, c.Do(t, "GET", "/ratelimit/check", nil).Status)
	}
	after, err := srv.CommandCalls(ctx)
	require.NoError(t, err)
	for cmd, n := range after {
		if cmd == "info" || cmd == "hello" || strings.HasPrefix(cmd, "client") {
			continue // our own INFO calls, and connection set-up
		}
		assert.Equal(t, before[cmd], n, "Redis ran %s %d more times during the flood", cmd, n-before[cmd])
	}
	assert.Positive(t, before["evalsha"]+before["eval"], "the admission did reach Redis")
}

func TestFailOpenAndClosed(t *testing.T) {
	srv := redistest.Start(t)
	open := apitest.NewClient(apitest.Start(t, redisEnv(srv, "LOCKGW_RATE_LIMIT_WINDOW", "1s")).URL)
	closed := apitest.NewClient(apitest.Start(t, redisEnv(srv, "LOCKGW_RATE_LIMIT_WINDOW", "1s", "LOCKGW_RATE_LIMIT_FAIL", "closed")).URL)
	srv.Kill()

	for range 3 {
		r := open.Do(t, "GET", "/ratelimit/check", nil)
		assert.Equal(t, http.StatusOK, r.Status, "fail open admits")
		assert.Empty(t, r.Header.Get("RateLimit"), "no decision, no headers")

		r = closed.Do(t, "GET", "/ratelimit/check", nil)
		require.Equal(t, http.StatusServiceUnavailable, r.Status, "fail closed refuses")
		assert.Equal(t, "backend-unavailable", r.ProblemType(t))
		assert.Equal(t, "1", r.Header.Get("Retry-After"))
	}
}

func TestShadowNeverRefuses(t *testing.T) {
	srv := redistest.Start(t)
	g := apitest.Start(t, exactEnv(srv, "LOCKGW_RATE_LIMIT_WINDOW", "10s", "LOCKGW_RATE_LIMIT_SHADOW", "true"))
	c := apitest.NewClient(g.URL)
	for i := range 5 {
		r := c.Do(t, "GET", "/ratelimit/check", nil)
		require.Equal(t, http.StatusOK, r.Status)
		assert.NotEmpty(t, r.Header.Get("RateLimit-Policy"), "shadow mode still sends the headers")
		if i > 0 {
			assert.Contains(t, r.Header.Get("RateLimit"), "r=0;t=")
		}
	}
	require.NoError(t, g.Stop())
	assert.Contains(t, g.Logs.String(), "rate limit would refuse")
}

// TestOnlyAcquiresLimitedByDefault: extends and releases pass, or a client
// would hold its lock longer for being throttled.
func TestOnlyAcquiresLimitedByDefault(t *testing.T) {
	g := apitest.Start(t, map[string]string{"LOCKGW_RATE_LIMIT_WINDOW": "10s"})
	c := apitest.NewClient(g.URL)
	path := "/locks/" + apitest.Key(t)
	r := c.Do(t, "PUT", path, nil)
	require.Equal(t, http.StatusCreated, r.Status)
	assert.Equal(t, `"1-per-10";q=1;w=10`, r.Header.Get("RateLimit-Policy"))
	token := r.JSON(t)["token"].(string)

	r = c.Do(t, "PUT", path+"-2", nil)
	require.Equal(t, http.StatusTooManyRequests, r.Status)
	retry, err := strconv.Atoi(r.Header.Get("Retry-After"))
	require.NoError(t, err)
	assert.InDelta(t, 10, retry, 1)

	require.Equal(t, http.StatusOK, c.Do(t, "GET", path, nil).Status)
	require.Equal(t, http.StatusOK, c.Do(t, "PATCH", path, nil, "Lock-Token", token).Status)
	require.Equal(t, http.StatusNoContent, c.Do(t, "DELETE", path, nil, "Lock-Token", token).Status)
}

func TestCheckRefuseStatusForNginx(t *testing.T) {
	g := apitest.Start(t, map[string]string{"LOCKGW_RATE_LIMIT_WINDOW": "10s"})
	c := apitest.NewClient(g.URL)
	require.Equal(t, http.StatusOK, c.Do(t, "GET", "/ratelimit/check?refuse_status=403", nil).Status)
	r := c.Do(t, "GET", "/ratelimit/check?refuse_status=403", nil)
	require.Equal(t, http.StatusForbidden, r.Status)
	assert.Equal(t, "rate-limited", r.ProblemType(t))
	assert.NotEmpty(t, r.Header.Get("Retry-After"))
	r = c.Do(t, "GET", "/ratelimit/check?refuse_status=500", nil)
	require.Equal(t, http.StatusBadRequest, r.Status)
}

func TestCheckAbsentWhenRateLimitingOff(t *testing.T) {
	g := apitest.Start(t, nil)
	r := apitest.NewClient(g.URL).Do(t, "GET", "/ratelimit/check", nil)
	require.Equal(t, http.StatusNotFound, r.Status)
}

// TestCheckAnyMethodAndPath: Envoy's ext_authz sends the client's method
// and appends the client's path.
func TestCheckAnyMethodAndPath(t *testing.T) {
	g := apitest.Start(t, map[string]string{"LOCKGW_RATE_LIMIT_WINDOW": "10s"})
	req, err := http.NewRequest("PUT", g.URL+"/ratelimit/check/api/orders/7", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = http.Post(g.URL+"/ratelimit/check", "", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
