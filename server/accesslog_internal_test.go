package server

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/middleware"
)

// TestAccessLogJSONAsZerolog: the access-log lines newLogger's JSON
// logger writes itself are, byte for byte, those zerolog writes through
// middleware.AccessLog (the duration aside, measured anew), at each level,
// for 5xx answers (warn), unmatched routes, and a method zerolog escapes.
func TestAccessLogJSONAsZerolog(t *testing.T) {
	duration := regexp.MustCompile(`"duration_ms":[0-9.]+`)
	router := func(accessLog func(http.Handler) http.Handler) http.Handler {
		r := chi.NewRouter()
		r.Use(middleware.RequestID, accessLog)
		r.Put("/locks/*", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
		r.Delete("/locks/*", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("down"))
		})
		return r
	}
	for _, level := range []zerolog.Level{zerolog.DebugLevel, zerolog.InfoLevel, zerolog.WarnLevel, zerolog.ErrorLevel} {
		for _, req := range []struct{ method, path, id string }{
			{"PUT", "/locks/jobs/nightly", "id-1"},
			{"DELETE", "/locks/jobs/nightly", "id-2"},
			{"GET", "/nowhere", "id-3"},
			{"PUT", "/locks/a", ""}, // a fresh id: set below from the answer
			{"BR\"EW", "/locks/a", "id-4"},
		} {
			for {
				var ours, theirs bytes.Buffer
				_, fast, flush := newLogger(Config{LogLevel: level, LogFormat: "json"}, &ours)
				ref := zerolog.New(&theirs).Level(level).Hook(&stampHook{})
				before := time.Now().Unix()
				id := req.id
				for i, h := range []http.Handler{router(fast), router(middleware.AccessLog(ref))} {
					r := httptest.NewRequest("PUT", req.path, nil)
					r.Method = req.method
					if id != "" {
						r.Header.Set("X-Request-Id", id)
					}
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					if i == 0 {
						id = w.Header().Get("X-Request-Id")
					}
				}
				flush()
				if time.Now().Unix() != before {
					continue // a second turned between the two lines
				}
				want := duration.ReplaceAllString(theirs.String(), `"duration_ms":0`)
				got := duration.ReplaceAllString(ours.String(), `"duration_ms":0`)
				require.Equal(t, want, got, "level %v, %s %s", level, req.method, req.path)
				if level <= zerolog.InfoLevel {
					assert.Contains(t, got, `"message":"request"`, "a line at level %v", level)
				}
				break
			}
		}
	}
}
