package ratelimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"

	"github.com/lockgateway/lockgateway/lockstore/memory"
	"github.com/lockgateway/lockgateway/ratelimit"
)

// Another chi service limits its own POST /orders to one per client IP per
// minute. Over several replicas, give every replica the same
// lockstore.NewRedis(client) instead of the in-process store.
func ExampleMiddleware() {
	limiter, err := ratelimit.New(memory.New(), time.Minute, ratelimit.Options{})
	if err != nil {
		panic(err)
	}
	limit, err := ratelimit.Middleware(limiter, ratelimit.Config{
		Key: ratelimit.Identity{}.Key, // the client IP, as chi stored it
	})
	if err != nil {
		panic(err)
	}

	r := chi.NewRouter()
	r.Use(chimw.ClientIPFromRemoteAddr)
	r.With(limit).Post("/orders", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})

	for range 2 {
		req := httptest.NewRequest("POST", "/orders", nil)
		req.RemoteAddr = "203.0.113.7:41000"
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("Retry-After"), rec.Header().Get("RateLimit"))
	}
	// Output:
	// 201  "1-per-60";r=0;t=60
	// 429 60 "1-per-60";r=0;t=60
}
