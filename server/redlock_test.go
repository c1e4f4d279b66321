package server_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
)

// TestRedlockQuorumLoss: with 2 of 5 nodes dead the gateway still grants;
// with 3 dead it answers 503 within about one node timeout, says why, and
// /readyz shows which nodes are down.
func TestRedlockQuorumLoss(t *testing.T) {
	nodes, env := redlockEnv(t, 5)
	env["LOCKGW_REDLOCK_NODE_TIMEOUT"] = "100ms"
	g := apitest.Start(t, env)
	c := apitest.NewClient(g.URL)

	// Ready once the nodes are warm, which a loaded machine can take a
	// while to get to.
	waitReady(t, c)
	r := c.Do(t, "GET", "/readyz", nil)
	require.Equal(t, http.StatusOK, r.Status)
	ready := r.JSON(t)
	assert.Equal(t, "redlock", ready["backend"])
	require.Len(t, ready["nodes"], 5)

	// Every acquire must be granted. A 503 is tried again with the token
	// it carries, if any, as the contract tells a client to, at most twice: on a
	// loaded machine a live node can miss the 100 ms now and then, and is
	// skipped until its prober hears it. A majority that did not suffice
	// would fail all three. The slowest grant bounds a round of the three
	// live nodes, for the 503 below.
	nodes[0].Kill()
	nodes[1].Kill()
	ok, retried := 0, 0
	var slowest time.Duration
	const n = 100
	for range n {
		key := "/locks/" + apitest.Key(t)
		start := time.Now()
		r := c.Do(t, "PUT", key, []byte(`{"ttl_ms":10000}`), apitest.JSON...)
		for try := 0; try < 2 && r.Status == http.StatusServiceUnavailable; try++ {
			retried++
			// Without a token when the store knew a majority impossible
			// before it tried (nodes marked down): nothing landed.
			headers := apitest.JSON
			if token, _ := r.Problem(t)["token"].(string); token != "" {
				headers = append([]string{"Lock-Token", token}, apitest.JSON...)
			}
			time.Sleep(100 * time.Millisecond)
			start = time.Now()
			r = c.Do(t, "PUT", key, []byte(`{"ttl_ms":10000}`), headers...)
		}
		if assert.Contains(t, []int{http.StatusCreated, http.StatusOK}, r.Status, "2 of 5 nodes dead: %s", r.Body) { // 200: the 503'd attempt had landed
			ok++
			slowest = max(slowest, time.Since(start))
		}
	}
	t.Logf("2 of 5 nodes dead: %d of %d acquires granted, %d 503s tried again; the slowest took %v", ok, n, retried, slowest)

	nodes[2].Kill()
	start := time.Now()
	r = c.Do(t, "PUT", "/locks/"+apitest.Key(t), nil)
	took := time.Since(start)
	require.Equal(t, http.StatusServiceUnavailable, r.Status)
	assert.Equal(t, "backend-unavailable", r.ProblemType(t))
	assert.Equal(t, "1", r.Header.Get("Retry-After"))
	assert.Contains(t, r.Problem(t)["detail"], "3 of 5 Redlock nodes did not answer")
	assert.NotContains(t, string(r.Body), "127.0.0.1", "no addresses in a 5xx body")
	// About one node timeout, not a hang: judged against the slowest grant
	// above, which waited for three live nodes as this waits for two.
	assert.Less(t, took, 500*time.Millisecond+slowest, "about one node timeout, not a hang")
	t.Logf("3 of 5 nodes dead: 503 in %v", took)

	r = c.Do(t, "GET", "/readyz", nil)
	require.Equal(t, http.StatusServiceUnavailable, r.Status)
	down := 0
	for _, n := range r.Problem(t)["nodes"].([]any) {
		if !n.(map[string]any)["up"].(bool) {
			down++
		}
	}
	assert.Equal(t, 3, down, "readyz names the nodes that are down")
}

// TestRedlockRateLimit: the limiter works over Redlock's nodes too, a
// window being a lease granted by a majority.
func TestRedlockRateLimit(t *testing.T) {
	const window = 300 * time.Millisecond
	nodes, env := redlockEnv(t, 3)
	env["LOCKGW_RATE_LIMIT_WINDOW"] = window.String()
	// Fail closed, with a roomy deadline: this test is about counting over
	// a majority, and a slow check on a loaded machine must not show up as
	// an admission without a check (fail-open's policy, which
	// TestFailOpenAndClosed covers; a 200 within the window came from it
	// past the 100 ms default). A failed check now fails the test as a 503.
	env["LOCKGW_RATE_LIMIT_FAIL"] = "closed"
	env["LOCKGW_RATE_LIMIT_TIMEOUT"] = "5s"
	// Both gateways first: one started inside a window can outlast it.
	c := apitest.NewClient(apitest.Start(t, env).URL)
	other := apitest.NewClient(apitest.Start(t, env).URL)

	// admit asks through c and requires an admission; it returns when
	// the question was sent, no later than the window began.
	admit := func(c *apitest.Client) time.Time {
		t.Helper()
		sent := time.Now()
		require.Equal(t, http.StatusOK, c.Do(t, "GET", "/ratelimit/check", nil).Status)
		return sent
	}
	// refused asks through c and requires a refusal while the window that
	// began at the earliest at since can be open: an answer that came
	// after since plus the window may rightly admit (a loaded machine);
	// it returns when the window that answer took began at the earliest.
	refused := func(c *apitest.Client, since time.Time, what string) time.Time {
		t.Helper()
		sent := time.Now()
		r := c.Do(t, "GET", "/ratelimit/check", nil)
		if r.Status == http.StatusOK && time.Since(since) > window {
			t.Logf("%s: admitted %v after the window began, later than it can last", what, time.Since(since))
			return sent
		}
		require.Equal(t, http.StatusTooManyRequests, r.Status, what)
		assert.Equal(t, "1", r.Header.Get("Retry-After"))
		return since
	}

	since := admit(c)
	since = refused(c, since, "the same gateway")
	// A second gateway on the same nodes learns the window from them.
	refused(other, since, "a second gateway")

	nodes[0].Kill() // a minority down changes nothing
	time.Sleep(window + 50*time.Millisecond)
	since = admit(other)
	refused(c, since, "after a node died")
}
