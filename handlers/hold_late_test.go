package handlers_test

import (
	"bytes"
	"encoding/json"
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
	"github.com/lockgateway/lockgateway/lockstore/memory"
)

// stallingStream is a hold's response writer whose first renewed event
// takes stall to write: the hold's goroutine does not run for that long, as
// when the gateway's process is stopped (SIGSTOP, a frozen VM) or a write
// blocks. It records each event and when the gateway began to write it.
type stallingStream struct {
	stall time.Duration

	mu      sync.Mutex
	header  http.Header
	stalled bool
	events  []writtenEvent
}

type writtenEvent struct {
	name    string
	at      time.Time // when the gateway began to write it
	expires time.Time // its expires_at
}

func (e writtenEvent) String() string {
	return e.name + " at " + e.at.Format("15:04:05.000") + " (expires_at " + e.expires.Format("15:04:05.000") + ")"
}

func (s *stallingStream) Header() http.Header { return s.header }
func (s *stallingStream) WriteHeader(int)     {}
func (s *stallingStream) Flush()              {}

func (s *stallingStream) Write(p []byte) (int, error) {
	at := time.Now()
	name, data, ok := strings.Cut(strings.TrimPrefix(string(p), "event: "), "\ndata: ")
	if !ok || !strings.HasPrefix(string(p), "event: ") { // a heartbeat
		return len(p), nil
	}
	var b struct {
		ExpiresAt time.Time `json:"expires_at"`
	}
	_ = json.Unmarshal([]byte(strings.TrimSpace(data)), &b)
	s.mu.Lock()
	s.events = append(s.events, writtenEvent{name, at, b.ExpiresAt})
	stall := name == "renewed" && !s.stalled
	s.stalled = s.stalled || stall
	s.mu.Unlock()
	if stall {
		time.Sleep(s.stall)
	}
	return len(p), nil
}

func (s *stallingStream) written() []writtenEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]writtenEvent(nil), s.events...)
}

// TestHoldSaysNothingAfterTheEnd: a hold whose goroutine could not run past
// the end it told the holder (its process stopped, a write stalled) must
// not say lost once it runs again: lost comes before the last expires_at
// the holder was told, never after (docs/api.md, "Lost means lost"). Nor
// renewed: the holder has stopped by its own clock at that end. The stream
// closes without a final event. Which of the two it would have said is up
// to the hold's select (both a renewal and the lost deadline are ready when
// it runs again), so each run tries one or the other. Found by the chaos
// row holds: a gateway stopped past its holds' end said lost when it was
// resumed.
func TestHoldSaysNothingAfterTheEnd(t *testing.T) {
	const ttl = 300 * time.Millisecond
	locks := handlers.NewLocks(memory.New(), handlers.Limits{
		DefaultTTL: time.Minute, MaxTTL: time.Hour, MaxWait: time.Minute, MaxBodyBytes: 1 << 16, BackendTimeout: time.Second,
	}, zerolog.Nop(), nil, nil)
	w := &stallingStream{stall: 3 * ttl, header: http.Header{}}
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPut, "/locks/late", bytes.NewReader([]byte(`{"ttl_ms":300}`)))
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	served := make(chan struct{})
	go func() {
		defer close(served)
		locks.Acquire().ServeHTTP(w, req)
	}()
	select {
	case <-served:
	case <-time.After(10 * ttl):
		t.Fatal("the hold did not end after its renewal's write stalled past the end")
	}

	events := w.written()
	require.GreaterOrEqual(t, len(events), 2, "acquired, then the renewal whose write stalled: %v", events)
	require.Equal(t, "acquired", events[0].name)
	require.Equal(t, "renewed", events[1].name)
	var told time.Time
	for _, ev := range events {
		switch ev.name {
		case "acquired", "renewed":
			assert.True(t, ev.at.Before(told) || told.IsZero(), "%s written at %s, after the end the holder was told (%s)",
				ev.name, ev.at.Format("15:04:05.000"), told.Format("15:04:05.000"))
			if ev.expires.After(told) {
				told = ev.expires
			}
		default:
			assert.True(t, ev.at.Before(told), "%s written at %s, after the end the holder was told (%s)",
				ev.name, ev.at.Format("15:04:05.000"), told.Format("15:04:05.000"))
		}
	}
	// The stall outlasted the renewal's lease: whatever came after it
	// came after the end.
	assert.Len(t, events, 2, "nothing after the stalled renewal: %v", events)
}
