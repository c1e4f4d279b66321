package middleware_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/middleware"
)

func TestRecovererAnswers500AndLogsOnce(t *testing.T) {
	var logs bytes.Buffer
	internal := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte("generic"))
	})
	h := middleware.RequestID(middleware.Recoverer(zerolog.New(&logs), internal)(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("secret internal state") })))

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	assert.Equal(t, http.StatusInternalServerError, rec.Code)
	assert.Equal(t, "generic", rec.Body.String(), "the panic value stays out of the response")
	assert.Equal(t, 1, strings.Count(logs.String(), "\n"), "one log line")
	assert.Contains(t, logs.String(), "secret internal state")
	assert.Contains(t, logs.String(), rec.Header().Get("X-Request-Id"))
}

func TestRecovererKeepsErrAbortHandler(t *testing.T) {
	h := middleware.Recoverer(zerolog.Nop(), http.NotFoundHandler())(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	require.PanicsWithValue(t, http.ErrAbortHandler, func() {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	})
}
