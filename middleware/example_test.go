package middleware_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"

	"github.com/lockgateway/lockgateway/middleware"
)

// The middleware fits any chi router: here a service of its own gets
// request ids, one access-log line per request, and panic recovery.
func Example() {
	log := zerolog.New(os.Stderr) // JSON lines; a test of ours reads them
	r := chi.NewRouter()
	r.Use(
		middleware.RequestID,
		middleware.AccessLog(log),
		middleware.Recoverer(log, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "internal error", http.StatusInternalServerError)
		})),
	)
	r.Get("/orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "order", chi.URLParam(r, "id"))
	})

	req := httptest.NewRequest("GET", "/orders/42", nil)
	req.Header.Set("X-Request-Id", "req-1")
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, req)
	fmt.Print(rec.Body.String())
	fmt.Println(rec.Header().Get("X-Request-Id"))
	// Output:
	// order 42
	// req-1
}
