package middleware

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
)

// TestAppendMillisAsZerolog: the access log's duration_ms is the text
// zerolog's Float64 wrote for micros/1000 (strconv's shortest 'f' form).
func TestAppendMillisAsZerolog(t *testing.T) {
	check := func(micros int64) {
		want := strconv.FormatFloat(float64(micros)/1000, 'f', -1, 64)
		if got := string(appendMillis(nil, micros)); got != want {
			t.Fatalf("appendMillis(%d) = %q, want %q", micros, got, want)
		}
	}
	for micros := int64(0); micros < 200_000; micros++ {
		check(micros)
	}
	for micros := int64(1); micros < 1<<53; micros = micros*3 + 7 {
		check(micros)
		check(micros + 999)
	}
}

// TestRoutePatternAsChi: the pattern routePattern takes from r.Pattern is
// the one chi's RoutePattern builds, for plain, With, Route and Mount
// routes, and a route that was not found or not allowed is "unmatched".
func TestRoutePatternAsChi(t *testing.T) {
	var fromPattern, fromChi string
	record := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r)
			fromPattern = routePattern(r)
			if rc := chi.RouteContext(r.Context()); rc != nil {
				fromChi = rc.RoutePattern()
			}
		})
	}
	ok := func(w http.ResponseWriter, r *http.Request) {}
	r := chi.NewRouter()
	r.Use(record)
	r.Get("/healthz", ok)
	r.With(NoStore).Put("/locks/*", ok)
	r.Route("/debug/pprof", func(r chi.Router) { r.Get("/heap", ok) })
	sub := chi.NewRouter()
	sub.Get("/{id}/items", ok)
	r.Mount("/orders", sub)

	for path, want := range map[string]string{
		"GET /healthz":          "/healthz",
		"PUT /locks/a/b":        "/locks/*",
		"GET /debug/pprof/heap": "/debug/pprof/heap",
		"GET /orders/7/items":   "/orders/{id}/items",
		"GET /nowhere":          "unmatched",
		"POST /healthz":         "unmatched",
	} {
		method, target, _ := strings.Cut(path, " ")
		fromPattern, fromChi = "", ""
		r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(method, target, nil))
		if fromPattern != want {
			t.Errorf("%s: routePattern %q, want %q", path, fromPattern, want)
		}
		if want != "unmatched" && fromChi != want {
			t.Errorf("%s: chi's RoutePattern %q, want %q", path, fromChi, want)
		}
	}
}
