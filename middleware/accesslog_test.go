package middleware_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/middleware"
)

func TestAccessLogOneLineWithRoutePattern(t *testing.T) {
	var logs bytes.Buffer
	r := chi.NewRouter()
	r.Use(middleware.RequestID, middleware.AccessLog(zerolog.New(&logs)))
	r.Put("/locks/*", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })

	req := httptest.NewRequest("PUT", "/locks/jobs/nightly", nil)
	req.Header.Set("Lock-Token", "do-not-log-this-token-123")
	req.Header.Set("Authorization", "Bearer do-not-log-this-key")
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, req)

	var line map[string]any
	require.NoError(t, json.Unmarshal(logs.Bytes(), &line), "exactly one JSON line: %s", logs.String())
	assert.Equal(t, "PUT", line["method"])
	assert.Equal(t, "/locks/*", line["route"], "the pattern, not the path")
	assert.Equal(t, float64(201), line["status"])
	assert.Contains(t, line, "duration_ms")
	assert.Equal(t, rec.Header().Get("X-Request-Id"), line["request_id"])
	assert.NotContains(t, logs.String(), "do-not-log")
}

// TestAccessLogMarksForcedReleases: a DELETE asking for a forced release
// says so in its line, answered or refused; nothing else does.
func TestAccessLogMarksForcedReleases(t *testing.T) {
	for _, tc := range []struct {
		method, target string
		force          bool
	}{
		{"DELETE", "/locks/jobs/nightly?force=true", true},
		{"DELETE", "/semaphores/exports?fence=17&force=true", true},
		{"DELETE", "/locks/jobs/nightly", false},
		{"DELETE", "/locks/jobs/nightly?force=false", false},
		{"GET", "/locks/jobs/nightly?force=true", false},
	} {
		var logs bytes.Buffer
		r := chi.NewRouter()
		r.Use(middleware.AccessLog(zerolog.New(&logs)))
		r.HandleFunc("/*", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusForbidden) })
		r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(tc.method, tc.target, nil))
		var line map[string]any
		require.NoError(t, json.Unmarshal(logs.Bytes(), &line), logs.String())
		if tc.force {
			assert.Equal(t, true, line["force"], tc.target)
		} else {
			assert.NotContains(t, line, "force", tc.method+" "+tc.target)
		}
	}
}
