package server_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/lockgateway/lockgateway/internal/apitest"
)

// TestDoubledUserHeaderSpendsNobodysWindow: behind a trusted proxy that
// appends to the user header instead of overwriting it, a client's forged
// "X-User: victim" arrives before the proxy's "X-User: attacker". Such a
// request is refused (400) and counted against nobody: the victim's window
// stays whole. Before, it was counted against the first value, the victim.
func TestDoubledUserHeaderSpendsNobodysWindow(t *testing.T) {
	// The test's connections come from 127.0.0.1: the trusted proxy.
	g := apitest.Start(t, map[string]string{
		"LOCKGW_RATE_LIMIT_WINDOW": "1m",
		"LOCKGW_USER_HEADER":       "X-User",
		"LOCKGW_TRUSTED_PROXIES":   "127.0.0.1/32",
	})
	c := apitest.NewClient(g.URL)

	for name, headers := range map[string][]string{
		"two lines":   {"X-User", "victim", "X-User", "attacker"},
		"joined":      {"X-User", "victim, attacker"},
		"first empty": {"X-User", "", "X-User", "attacker"},
		"same twice":  {"X-User", "attacker", "X-User", "attacker"},
	} {
		t.Run(name, func(t *testing.T) {
			r := c.Do(t, "PUT", "/locks/"+apitest.Key(t), nil, headers...)
			assert.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
			if r.Status == http.StatusBadRequest {
				assert.Equal(t, "malformed-request", r.ProblemType(t))
				assert.Contains(t, r.Problem(t)["detail"], "X-User")
			}
		})
	}
	r := c.Do(t, "GET", "/ratelimit/check", nil, "X-User", "victim", "X-User", "attacker")
	assert.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)

	// Nobody's window was spent: the victim's first request, and the
	// attacker's, are each admitted once.
	for _, user := range []string{"victim", "attacker"} {
		r := c.Do(t, "PUT", "/locks/"+apitest.Key(t), nil, "X-User", user)
		assert.Equal(t, http.StatusCreated, r.Status, "%s's window was spent: %s", user, r.Body)
		r = c.Do(t, "PUT", "/locks/"+apitest.Key(t), nil, "X-User", user)
		assert.Equal(t, http.StatusTooManyRequests, r.Status, "%s: one request per window", user)
	}
}
