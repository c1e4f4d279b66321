package handlers_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/handlers"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/memory"
)

// sse is one event of a stream.
type sse struct{ name, data string }

// putHold sends a hold's PUT to url.
func putHold(ctx context.Context, url, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, "PUT", url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

// events delivers the events of a hold's answer.
func events(t *testing.T, resp *http.Response, err error) <-chan sse {
	t.Helper()
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	ch := make(chan sse, 16)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var ev sse
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "" && ev.name != "":
				ch <- ev
				ev = sse{}
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return ch
}

func nextSSE(t *testing.T, ch <-chan sse) sse {
	t.Helper()
	select {
	case ev, ok := <-ch:
		require.True(t, ok, "the stream ended")
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
		return sse{}
	}
}

// TestHoldOfAWaiterKeepsTheKey: a hold that waited for a key, which
// another hold had, gets the key and keeps it. The key's watch, which the
// first hold started, had last read the key before the second's grant
// (held by the first, or free), and the second hold's stream used to
// judge that state and end at once: lost (taken), or released.
func TestHoldOfAWaiterKeepsTheKey(t *testing.T) {
	mem := memory.New()
	locks := handlers.NewLocks(mem, handlers.Limits{
		DefaultTTL: time.Minute, MaxTTL: time.Hour, MaxWait: time.Minute, MaxBodyBytes: 1 << 16, BackendTimeout: time.Second,
	}, zerolog.Nop(), nil, nil)
	srv := httptest.NewServer(locks.Acquire())
	// After t.Context ends, which ends the streams: Close waits for them.
	t.Cleanup(srv.Close)

	for i := range 10 {
		key := "k" + string(rune('a'+i))
		resp, err := putHold(t.Context(), srv.URL+"/locks/"+key, `{"ttl_ms":300}`)
		first := events(t, resp, err)
		acq := nextSSE(t, first)
		require.Equal(t, "acquired", acq.name)
		var grant struct{ Token string }
		require.NoError(t, json.Unmarshal([]byte(acq.data), &grant))

		type answer struct {
			resp *http.Response
			err  error
		}
		second := make(chan answer, 1)
		go func() {
			resp, err := putHold(t.Context(), srv.URL+"/locks/"+key, `{"ttl_ms":300,"wait_ms":10000}`)
			second <- answer{resp, err}
		}()
		// The second waits (its PUT has not been answered) while the
		// first holds; then the first's token releases the key.
		require.Eventually(t, func() bool {
			l, err := mem.List(context.Background(), lockstore.ListQuery{Prefix: key, Limit: 1})
			return err == nil && len(l.Items) == 1 && l.Items[0].Waiters == 1
		}, 5*time.Second, time.Millisecond, "the second hold waits")
		require.NoError(t, mem.Release(context.Background(), key, grant.Token))
		// The first hold ends: released, or (when the key's watch reads it
		// only after the second's grant) lost, taken. Before that it may
		// have renewed its 300 ms lease (a loaded machine's wait above can
		// outlast a renewal's interval).
		end := nextSSE(t, first)
		for end.name == "renewed" {
			end = nextSSE(t, first)
		}
		assert.Contains(t, []string{"released", "lost"}, end.name, "the first hold's end")

		a := <-second
		then := events(t, a.resp, a.err)
		require.Equal(t, "acquired", nextSSE(t, then).name)
		// Renewals every third of the TTL: two of them, nothing else.
		for range 2 {
			ev := nextSSE(t, then)
			require.Equal(t, "renewed", ev.name, "hand-off %d: %s %s", i, ev.name, ev.data)
		}
	}
}
