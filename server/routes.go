package server

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"

	"github.com/lockgateway/lockgateway/handlers"
	"github.com/lockgateway/lockgateway/middleware"
)

// addRoutes is the whole HTTP surface, in one place; openapi.yaml describes
// the same routes.
func addRoutes(r chi.Router, d deps) {
	locks := handlers.NewLocks(d.store, d.limits, d.log, d.stopping, d.metrics)

	r.Get("/healthz", handlers.Healthz().ServeHTTP)
	r.Get("/metrics", d.metrics.Handler().ServeHTTP)
	if d.pprof {
		r.Mount("/debug", chimw.Profiler())
	}
	r.Get("/readyz", handlers.Readyz(d.store, d.backend, d.nodes, d.limits.BackendTimeout, d.log).ServeHTTP)
	r.Get("/openapi.yaml", handlers.OpenAPI(d.spec).ServeHTTP)

	// A key may hold "/", so the lock routes take the rest of the path.
	// API keys (when configured) come before the rate limit, which counts
	// per authenticated user.
	lock := r.With(middleware.NoStore)
	if d.auth != nil {
		lock = lock.With(d.auth)
	}
	if d.limit != nil {
		lock = lock.With(d.limit)
	}
	lock.Put("/locks/*", locks.Acquire().ServeHTTP)
	lock.Patch("/locks/*", locks.Extend().ServeHTTP)
	lock.Delete("/locks/*", locks.Release().ServeHTTP)
	lock.Get("/locks/*", locks.Inspect().ServeHTTP)

	if d.check != nil { // rate limiting is on
		// Any method, and any path below: Envoy's ext_authz forwards the
		// client's method and appends the client's path.
		check := r.With(middleware.NoStore, d.check)
		check.Handle("/ratelimit/check", handlers.Admitted())
		check.Handle("/ratelimit/check/*", handlers.Admitted())
	}
}

// allowedMethods lists the methods router serves for r's path, for the
// Allow header of a 405.
func allowedMethods(router chi.Routes) func(r *http.Request) []string {
	methods := []string{http.MethodGet, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodPost, http.MethodHead}
	return func(r *http.Request) []string {
		var allowed []string
		for _, m := range methods {
			if router.Match(chi.NewRouteContext(), m, r.URL.EscapedPath()) {
				allowed = append(allowed, m)
			}
		}
		return allowed
	}
}
