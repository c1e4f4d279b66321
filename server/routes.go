package server

import (
	"net/http"
	"net/http/pprof"

	"github.com/go-chi/chi/v5"

	"github.com/lockgateway/lockgateway/handlers"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/middleware"
	"github.com/lockgateway/lockgateway/problem"
	"github.com/lockgateway/lockgateway/ui"
)

// addRoutes is the whole HTTP surface, in one place; openapi.yaml describes
// the same routes.
func addRoutes(r chi.Router, d deps) {
	locks := handlers.NewLocks(d.store, d.limits, d.log, d.stopping, d.metrics)
	if d.watch != nil {
		locks.Watching(d.watch)
	}
	if d.holdConns != nil {
		locks.ServeHoldsOn(d.holdConns)
	}

	r.Get("/healthz", handlers.Healthz().ServeHTTP)
	if !d.metricsApart {
		r.Get("/metrics", d.metrics.Handler().ServeHTTP)
	}
	if d.pprof {
		// Go's profiler, but not cmdline, whose arguments may hold a Redis
		// password, nor expvar's /debug/vars, which repeats them. With API
		// keys only a user allowed every key may use it; without, the
		// gateway must listen on loopback (config.go).
		r.Route("/debug/pprof", func(r chi.Router) {
			r.Use(middleware.NoStore)
			if d.pprofAuth != nil {
				r.Use(d.pprofAuth)
			}
			r.Get("/", pprof.Index)
			for _, name := range []string{"allocs", "block", "goroutine", "heap", "mutex", "threadcreate"} {
				r.Get("/"+name, pprof.Handler(name).ServeHTTP)
			}
			r.Get("/profile", pprof.Profile)
			r.Get("/trace", pprof.Trace)
			r.Get("/symbol", pprof.Symbol)
			r.Post("/symbol", pprof.Symbol)
		})
	}
	r.Get("/readyz", handlers.Readyz(d.store, d.backend, d.nodes, d.topology, d.limits.BackendTimeout, d.log).ServeHTTP)
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
	if d.sems != nil {
		sems := handlers.NewSemaphores(d.sems, locks)
		if d.semWatch != nil {
			sems.Watching(d.semWatch)
		}
		lock.Put("/semaphores/*", sems.Acquire().ServeHTTP)
		lock.Patch("/semaphores/*", sems.Extend().ServeHTTP)
		lock.Delete("/semaphores/*", sems.Release().ServeHTTP)
		lock.Get("/semaphores/*", sems.Inspect().ServeHTTP)
	}

	// What the caller's API key may do: the dashboard offers a forced
	// release only where the key administers the lock key.
	who := r.With(middleware.NoStore)
	if d.whoAuth != nil {
		who = who.With(d.whoAuth)
	}
	who.Get("/whoami", handlers.Whoami(d.whoAuth != nil, d.log).ServeHTTP)

	if d.lister != nil {
		list := r.With(middleware.NoStore)
		if d.listAuth != nil {
			list = list.With(d.listAuth)
		}
		listings := handlers.NewListings(d.lister, d.limits.BackendTimeout, d.log).MarkingHolds(locks)
		list.Get("/locks", listings.Locks().ServeHTTP)
		if sl, ok := d.lister.(lockstore.SemLister); ok && d.sems != nil {
			list.Get("/semaphores", listings.Semaphores(sl).ServeHTTP)
		}
	}

	if d.ui {
		// The page is public; the data it shows comes from GET /locks,
		// which asks for an API key when the gateway has them.
		r.Get("/ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently).ServeHTTP)
		r.Get("/ui/*", ui.Handler(handlers.NotFound()).ServeHTTP)
	} else {
		// Still a 404, but one that says why: the page is off, not missing.
		off := handlers.Refuse(problem.NotFound, uiOff(d.uiAuto))
		r.Get("/ui", off.ServeHTTP)
		r.Get("/ui/*", off.ServeHTTP)
	}

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

// uiOff is the 404's detail for /ui/ when the dashboard is off: auto (the
// default) turned it off because the address is not loopback, or the
// configuration did.
func uiOff(auto bool) string {
	if auto {
		return "the dashboard is off on this address: LOCKGW_UI is auto, which serves it only when LOCKGW_ADDR is a loopback address, " +
			"as the page shows every held key and its owner to whoever can reach it; set LOCKGW_UI=true (--ui) to serve it here anyway"
	}
	return "the dashboard is off: LOCKGW_UI is false; set LOCKGW_UI=true (--ui), or auto to serve it on a loopback address"
}
