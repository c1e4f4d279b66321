package server_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
)

// TestRedlockRateLimitBurst is the liveness test of issue 12, item 8: over
// Redlock, with every node healthy and the default fail-open policy, one
// client's own burst of concurrent acquires is admitted exactly once per
// window. Before the limiter coalesced one user's concurrent checks, the
// burst's window acquires split the nodes' votes, retried, ran past the
// 100 ms check deadline, and fail-open admitted each one that did.
func TestRedlockRateLimitBurst(t *testing.T) {
	const (
		window = 2 * time.Second
		burst  = 100
		rounds = 3
	)
	_, env := redlockEnv(t, 5)
	env["LOCKGW_RATE_LIMIT_WINDOW"] = window.String()
	// Fail open and the default check timeout: the configuration of the
	// report. The identity is the client address, 127.0.0.1 for every
	// request.
	g := apitest.Start(t, env)
	c := apitest.NewClient(g.URL)
	c.HTTP.Transport = &http.Transport{MaxIdleConnsPerHost: burst}

	// Open the connections first, so that the burst is a burst of requests
	// and not of TCP handshakes.
	var wg sync.WaitGroup
	for range burst {
		wg.Go(func() { c.Do(t, "GET", "/healthz", nil) })
	}
	wg.Wait()

	key := apitest.Key(t)
	for round := range rounds {
		if round > 0 {
			time.Sleep(window + 200*time.Millisecond) // a new window
		}
		var mu sync.Mutex
		admitted, refused, unchecked := 0, 0, 0
		start := time.Now()
		for i := range burst {
			wg.Go(func() {
				r := c.Do(t, "PUT", fmt.Sprintf("/locks/%s/%d/%d", key, round, i), nil)
				mu.Lock()
				defer mu.Unlock()
				if r.Status == http.StatusTooManyRequests {
					refused++
					return
				}
				// Anything else went past the limiter: an admission,
				// whatever the lock backend then answered.
				admitted++
				if r.Header.Get("RateLimit") == "" {
					unchecked++ // admitted because the check failed
				}
				assert.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
			})
		}
		wg.Wait()
		took := time.Since(start)
		t.Logf("round %d: %d admitted (%d without a check), %d refused, in %v", round, admitted, unchecked, refused, took)
		require.Equal(t, burst, admitted+refused)
		require.GreaterOrEqual(t, admitted, 1, "round %d admitted nobody", round)
		if took >= window {
			// Only a machine too loaded to answer 100 requests in the
			// window gets here; a second window then legitimately opened.
			t.Logf("round %d outlasted the window: not judged", round)
			continue
		}
		require.Equal(t, 1, admitted, "round %d: exactly one admission per window (%d admitted without a check)", round, unchecked)
	}
}
