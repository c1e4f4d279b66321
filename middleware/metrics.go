package middleware

import (
	"net/http"
	"time"

	chimw "github.com/go-chi/chi/v5/middleware"
)

// Observe reports every request's route pattern, method, status and
// duration to observe, e.g. a Prometheus histogram. Like AccessLog it knows
// the route only after the router ran, so it wraps the router.
func Observe(observe func(route, method string, status int, took time.Duration)) func(http.Handler) http.Handler {
	if observe == nil {
		panic("middleware.Observe: nil observe func")
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			// Behind AccessLog, w already counts status and bytes: a second
			// wrapper would cost an allocation and an indirection on every
			// write for the same figures.
			ww, ok := w.(chimw.WrapResponseWriter)
			if !ok {
				ww = chimw.NewWrapResponseWriter(w, r.ProtoMajor)
			}
			next.ServeHTTP(ww, r)
			status := ww.Status()
			if status == 0 {
				status = http.StatusOK
			}
			route, method := routePattern(r), r.Method
			if d := detached(r); d != nil { // observed when it ends (detach.go)
				d.atEnd(func(int64) { observe(route, method, status, time.Since(start)) })
				return
			}
			observe(route, method, status, time.Since(start))
		})
	}
}
