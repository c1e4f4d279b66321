package middleware

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"
	"github.com/rs/zerolog"
)

// AccessLog writes one line per request: method, route pattern, status,
// duration, bytes written and request id. It logs the route pattern
// ("/locks/*"), not the path, and never a header, so tokens, API keys and
// Authorization values cannot reach the log.
func AccessLog(log zerolog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			ww := chimw.NewWrapResponseWriter(w, r.ProtoMajor)
			defer func() {
				status := ww.Status()
				if status == 0 { // nothing written: net/http sends 200
					status = http.StatusOK
				}
				route := routePattern(r)
				ev := log.Info()
				if status >= 500 {
					ev = log.Warn()
				}
				ev.Str("method", r.Method).
					Str("route", route).
					Int("status", status).
					Float64("duration_ms", float64(time.Since(start).Microseconds())/1000).
					Int("bytes", ww.BytesWritten()).
					Str("request_id", GetRequestID(r.Context())).
					Msg("request")
			}()
			next.ServeHTTP(ww, r)
		})
	}
}

// routePattern is the chi route r matched ("/locks/*"), or "unmatched":
// a pattern, never a path, so neither logs nor metric labels grow with keys.
func routePattern(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
		return rc.RoutePattern()
	}
	return "unmatched"
}
