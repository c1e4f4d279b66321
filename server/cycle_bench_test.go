package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockgateway/lockgateway"
	"github.com/lockgateway/lockgateway/handlers"
	"github.com/lockgateway/lockgateway/lockstore/memory"
	"github.com/lockgateway/lockgateway/metrics"
	"github.com/lockgateway/lockgateway/ratelimit"
)

// BenchmarkCycle is the gateway's own work for one acquire+release cycle
// as make bench drives it (PUT {"ttl_ms":10000}, then DELETE with
// Lock-Token): the whole middleware chain, routing, decoding, encoding, the
// access log at info level (JSON, written to a buffer as in production)
// and the metrics, over the memory store, without sockets. What the
// gateway spends beyond the bare baseline is in here; -benchmem's allocs/op
// and callgrind's instruction counts are steady even on a busy machine.
func BenchmarkCycle(b *testing.B) {
	d, flush := cycleDeps()
	defer flush()
	cycles(b, newHandler(d))
}

// cycleDeps are BenchmarkCycle's gateway's: the memory store, logs at info
// level, metrics.
func cycleDeps() (deps, func()) {
	m := metrics.New()
	log, flush := newLogger(Config{LogLevel: zerolog.InfoLevel, LogFormat: "json"}, io.Discard)
	return deps{
		store:      memory.NewWith(memory.Options{MaxLocks: 1000}),
		backend:    BackendMemory,
		limits:     handlers.Limits{DefaultTTL: 30 * time.Second, MaxTTL: 24 * time.Hour, MaxWait: time.Minute, MaxBodyBytes: 65536, BackendTimeout: time.Second},
		log:        log,
		spec:       lockgateway.OpenAPI,
		stopping:   make(chan struct{}),
		clientAddr: ratelimit.PeerAddr,
		metrics:    m,
	}, flush
}

// cycles runs b.N acquire+release cycles through h.
func cycles(b *testing.B, h http.Handler) {
	body := []byte(`{"ttl_ms":10000}`)
	w := &discardWriter{header: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		put := newRequest(http.MethodPut, "/locks/bench/1", body)
		w.reset()
		h.ServeHTTP(w, put)
		if w.status != http.StatusCreated {
			b.Fatalf("PUT: %d %s", w.status, w.body.String())
		}
		var lease struct {
			Token string `json:"token"`
		}
		if err := json.Unmarshal(w.body.Bytes(), &lease); err != nil {
			b.Fatal(err)
		}
		del := newRequest(http.MethodDelete, "/locks/bench/1", nil)
		del.Header.Set("Lock-Token", lease.Token)
		w.reset()
		h.ServeHTTP(w, del)
		if w.status != http.StatusNoContent {
			b.Fatalf("DELETE: %d %s", w.status, w.body.String())
		}
	}
}

// newRequest is a request as net/http's server hands it to the handler.
func newRequest(method, path string, body []byte) *http.Request {
	r, err := http.NewRequest(method, "http://127.0.0.1:8080"+path, bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	r.RequestURI = path
	r.RemoteAddr = "127.0.0.1:40000"
	r.Header.Set("User-Agent", "lockbench")
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	} else {
		r.Body = http.NoBody
	}
	return r
}

// discardWriter keeps the status and body and nothing else.
type discardWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *discardWriter) reset() {
	clear(w.header)
	w.status = 0
	w.body.Reset()
}

func (w *discardWriter) Header() http.Header { return w.header }

func (w *discardWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *discardWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}
