package middleware_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/middleware"
)

// TestDetachedRequestIsRecordedAtItsEnd: a request whose handler detached
// it gets no access line and no observation when the handler returns, and
// one of each when End comes, with the whole duration and every byte.
func TestDetachedRequestIsRecordedAtItsEnd(t *testing.T) {
	var logs bytes.Buffer
	type observed struct {
		route, method string
		status        int
		took          time.Duration
	}
	var seen []observed
	r := chi.NewRouter()
	r.Use(middleware.RequestID, middleware.AccessLog(zerolog.New(&logs)),
		middleware.Observe(func(route, method string, status int, took time.Duration) {
			seen = append(seen, observed{route, method, status, took})
		}))
	var d *middleware.Detached
	r.Put("/locks/*", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("event: acquired\n\n"))
		d = middleware.Detach(r)
	})

	start := time.Now()
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("PUT", "/locks/jobs/nightly", nil))
	require.NotNil(t, d, "RequestID keeps the mark")
	assert.Empty(t, logs.String(), "no line when the handler returns")
	assert.Empty(t, seen, "no observation when the handler returns")

	time.Sleep(50 * time.Millisecond) // the request goes on after its handler
	d.End(int64(len("event: renewed\n\n")))
	d.End(1000) // a second End records nothing
	took := time.Since(start)

	var line map[string]any
	require.NoError(t, json.Unmarshal(logs.Bytes(), &line), "exactly one JSON line: %s", logs.String())
	assert.Equal(t, float64(201), line["status"])
	assert.Equal(t, float64(len("event: acquired\n\n")+len("event: renewed\n\n")), line["bytes"], "the bytes of before and after Detach")
	assert.GreaterOrEqual(t, line["duration_ms"], 50.0, "the duration is to End")
	assert.LessOrEqual(t, line["duration_ms"], float64(took.Microseconds())/1000)
	require.Len(t, seen, 1)
	assert.Equal(t, observed{"/locks/*", "PUT", 201, seen[0].took}, seen[0])
	assert.GreaterOrEqual(t, seen[0].took, 50*time.Millisecond)
}

// TestDetachedRequestEndedBeforeItsHandlerReturned: End may come before
// the middlewares above the handler have run (the response ended on
// another goroutine at once); each still records once, as it runs.
func TestDetachedRequestEndedBeforeItsHandlerReturned(t *testing.T) {
	var logs bytes.Buffer
	observed := 0
	r := chi.NewRouter()
	r.Use(middleware.RequestID, middleware.AccessLog(zerolog.New(&logs)),
		middleware.Observe(func(string, string, int, time.Duration) { observed++ }))
	r.Put("/locks/*", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		middleware.Detach(r).End(7)
	})
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("PUT", "/locks/jobs/nightly", nil))
	var line map[string]any
	require.NoError(t, json.Unmarshal(logs.Bytes(), &line), "exactly one JSON line: %s", logs.String())
	assert.Equal(t, float64(7), line["bytes"])
	assert.Equal(t, 1, observed)
}

// TestDetachNeedsRequestID: without RequestID nothing keeps the mark, and
// Detach says so; the request is recorded when its handler returns.
func TestDetachNeedsRequestID(t *testing.T) {
	var logs bytes.Buffer
	r := chi.NewRouter()
	r.Use(middleware.AccessLog(zerolog.New(&logs)))
	r.Put("/locks/*", func(w http.ResponseWriter, r *http.Request) {
		assert.Nil(t, middleware.Detach(r))
	})
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("PUT", "/locks/x", nil))
	assert.Contains(t, logs.String(), `"status":200`)
}
