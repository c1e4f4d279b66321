package server_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/server"
)

// withSecretArgs puts a Redis password among the process's arguments, as
// `lockgateway --redis-url redis://:<password>@…` has it, for the test's
// length. The gateway runs in the test process, so os.Args is what a
// profiler would show of its command line.
func withSecretArgs(t *testing.T) string {
	const secret = "hunter2-pprof-secret"
	saved := os.Args
	os.Args = append(append([]string{}, saved...), "--redis-url", "redis://:"+secret+"@10.0.0.5:6379/0")
	t.Cleanup(func() { os.Args = saved })
	return secret
}

// TestProfilerNeedsAKeyAndShowsNoSecret: with API keys on, the profiler
// answers only a user allowed every key, and never the command line
// (/debug/pprof/cmdline, expvar's /debug/vars), which held the Redis
// password verbatim, without a key. Before, all of /debug/ was open.
func TestProfilerNeedsAKeyAndShowsNoSecret(t *testing.T) {
	secret := withSecretArgs(t)
	g := apitest.Start(t, map[string]string{
		"LOCKGW_PPROF":         "true",
		"LOCKGW_API_KEYS_FILE": keysFile(t, `["teamA/"]`),
	})
	c := apitest.NewClient(g.URL)

	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine?debug=1", "/debug/pprof/symbol"} {
		for key, want := range map[string]int{"": 401, "nope": 401, "a-key": 403, "ops-key": 200} {
			var h []string
			if key != "" {
				h = []string{"Authorization", "Bearer " + key}
			}
			r := c.Do(t, "GET", path, nil, h...)
			assert.Equal(t, want, r.Status, "%s with key %q", path, key)
			assert.NotContains(t, string(r.Body), secret, "%s", path)
		}
	}
	for _, path := range []string{"/debug/pprof/cmdline", "/debug/vars", "/debug/pprof/cmdline?debug=1"} {
		for _, key := range []string{"", "ops-key"} {
			r := c.Do(t, "GET", path, nil, "Authorization", "Bearer "+key)
			assert.Contains(t, []int{401, 404}, r.Status, "%s with key %q: %s", path, key, r.Body)
			assert.NotContains(t, string(r.Body), secret, "%s with key %q", path, key)
		}
	}
}

// TestProfilerWithoutKeysOnlyOnLoopback: without API keys there is no key
// to ask for, so the profiler may only be on when the gateway listens on
// loopback; on any other address the gateway does not start.
func TestProfilerWithoutKeysOnlyOnLoopback(t *testing.T) {
	secret := withSecretArgs(t)
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0"} {
		t.Run(addr, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			env := map[string]string{"LOCKGW_ADDR": addr, "LOCKGW_PPROF": "true", "LOCKGW_ALLOW_UNAUTHENTICATED": "true"}
			err := server.Run(ctx, nil, func(k string) string { return env[k] }, io.Discard, io.Discard)
			require.Error(t, err, "the profiler was served on %s without API keys", addr)
			assert.Contains(t, err.Error(), "LOCKGW_PPROF")
			assert.Contains(t, err.Error(), "loopback")
		})
	}

	// apitest listens on 127.0.0.1: allowed, and open to the machine itself.
	g := apitest.Start(t, map[string]string{"LOCKGW_PPROF": "true"})
	c := apitest.NewClient(g.URL)
	r := c.Do(t, "GET", "/debug/pprof/heap?debug=1", nil)
	require.Equal(t, http.StatusOK, r.Status)
	assert.True(t, strings.HasPrefix(string(r.Body), "heap profile:"), "%.40s", r.Body)
	r = c.Do(t, "GET", "/debug/pprof/cmdline", nil)
	assert.Equal(t, http.StatusNotFound, r.Status)
	assert.NotContains(t, string(r.Body), secret)
}
