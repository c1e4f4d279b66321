package handlers_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/handlers"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/memory"
)

// endProbe is a hold's response writer (served by net/http, not taken
// over) that, as the gateway writes the final event, has another client
// try the key: the holder has not read that event yet, and holds the key
// by everything it was told (its last expires_at is ahead).
type endProbe struct {
	store  lockstore.Store
	key    string
	header http.Header

	mu    sync.Mutex
	final string
	other error // the other client's acquire: nil if it was granted
}

func (p *endProbe) Header() http.Header { return p.header }
func (p *endProbe) WriteHeader(int)     {}
func (p *endProbe) Flush()              {}

func (p *endProbe) Write(b []byte) (int, error) {
	s := string(b)
	if !strings.HasPrefix(s, "event: ") || strings.HasPrefix(s, "event: acquired") || strings.HasPrefix(s, "event: renewed") {
		return len(b), nil
	}
	_, err := p.store.Acquire(context.Background(), p.key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	p.mu.Lock()
	defer p.mu.Unlock()
	p.final = strings.SplitN(s, "\n", 2)[0]
	p.other = err
	return len(b), nil
}

// TestHoldEndedByGateway: a hold the gateway ends (its shutdown,
// max_hold_ms) tells the holder before the key can go to anyone else, and
// frees it once the holder closed its stream; a holder that does not close
// keeps the key until its lease's TTL. Before, the lease was released
// first: another client was granted the key before the final event left
// (found by review, on both ends).
func TestHoldEndedByGateway(t *testing.T) {
	for _, how := range []string{"shutdown", "max-hold"} {
		for _, closes := range []bool{true, false} {
			t.Run(how+map[bool]string{true: "/holder closes", false: "/holder stays"}[closes], func(t *testing.T) {
				store := memory.New()
				stopping := make(chan struct{})
				locks := handlers.NewLocks(store, handlers.Limits{
					DefaultTTL: time.Minute, MaxTTL: time.Hour, MaxWait: time.Minute, MaxBodyBytes: 1 << 16, BackendTimeout: time.Second,
				}, zerolog.Nop(), stopping, nil)
				key := "ended/" + how
				w := &endProbe{store: store, key: key, header: http.Header{}}
				body := `{"ttl_ms":5000}` // lostMargin 500 ms: the wait for the close
				if how == "max-hold" {
					body = `{"ttl_ms":5000,"max_hold_ms":200}`
				}
				ctx, hangUp := context.WithCancel(context.Background())
				defer hangUp()
				req := httptest.NewRequestWithContext(ctx, http.MethodPut, "/locks/"+key, bytes.NewReader([]byte(body)))
				req.Header.Set("Accept", "text/event-stream")
				req.Header.Set("Content-Type", "application/json")
				served := make(chan struct{})
				go func() {
					defer close(served)
					locks.Acquire().ServeHTTP(w, req)
				}()
				if how == "shutdown" {
					time.Sleep(200 * time.Millisecond)
					close(stopping)
				}
				require.Eventually(t, func() bool {
					w.mu.Lock()
					defer w.mu.Unlock()
					return w.final != ""
				}, 5*time.Second, time.Millisecond, "a final event")
				if closes {
					hangUp() // the holder read the end and closed its stream
				}
				select {
				case <-served:
				case <-time.After(5 * time.Second):
					t.Fatal("the hold did not end")
				}
				w.mu.Lock()
				defer w.mu.Unlock()
				assert.Equal(t, "event: ended", w.final)
				require.Error(t, w.other, "another client was granted the key while the final event was being written")
				_, err := store.Inspect(context.Background(), key)
				if closes {
					assert.ErrorIs(t, err, lockstore.ErrNotHeld, "freed once the holder closed its stream")
				} else {
					assert.NoError(t, err, "a holder that did not close keeps the key until its TTL")
				}
			})
		}
	}
}
