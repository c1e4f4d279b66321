package handlers_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/handlers"
	"github.com/lockgateway/lockgateway/lockstore/memory"
	"github.com/lockgateway/lockgateway/middleware"
)

// holdGateway serves PUT, DELETE and the listing of locks over store, as
// one gateway does. With conns, holds take their connections over from
// net/http, as the server's do (hold_conn.go); without, net/http serves
// them.
func holdGateway(t *testing.T, store *memory.Store, conns *handlers.HoldConns) *httptest.Server {
	t.Helper()
	locks := handlers.NewLocks(store, handlers.Limits{
		DefaultTTL: time.Minute, MaxTTL: time.Hour, MaxWait: time.Minute, MaxBodyBytes: 1 << 16, BackendTimeout: time.Second,
	}, zerolog.Nop(), nil, nil)
	listings := handlers.NewListings(store, time.Second, zerolog.Nop()).MarkingHolds(locks)
	mux := http.NewServeMux()
	mux.Handle("PUT /locks/", locks.Acquire())
	mux.Handle("DELETE /locks/", locks.Release())
	mux.Handle("GET /locks", listings.Locks())
	srv := httptest.NewUnstartedServer(mux)
	if conns != nil {
		locks.ServeHoldsOn(conns)
		srv.Config.Handler = middleware.RequestID(mux)
		srv.Config.ConnContext = handlers.ConnContext
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// bothWays runs test on holds served by net/http, and on holds that take
// their connections over; then it checks that these did, each closing its
// connection once.
func bothWays(t *testing.T, test func(t *testing.T, conns *handlers.HoldConns)) {
	t.Run("net/http", func(t *testing.T) { test(t, nil) })
	t.Run("taken over", func(t *testing.T) {
		var closed atomic.Int32
		test(t, handlers.NewHoldConns(func() { closed.Add(1) }))
		assert.Eventually(t, func() bool { return closed.Load() == 1 }, 5*time.Second, 5*time.Millisecond,
			"the hold took its connection over, and closed it once")
	})
}

// heldByStream is the listing's held_by_stream of each key srv lists.
func heldByStream(t *testing.T, srv *httptest.Server) map[string]bool {
	t.Helper()
	resp, err := http.Get(srv.URL + "/locks")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var page struct {
		Items []struct {
			Key          string `json:"key"`
			HeldByStream *bool  `json:"held_by_stream"`
		} `json:"items"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	out := map[string]bool{}
	for _, it := range page.Items {
		require.NotNil(t, it.HeldByStream, "%s: every item says held_by_stream", it.Key)
		out[it.Key] = *it.HeldByStream
	}
	return out
}

func deleteLock(t *testing.T, srv *httptest.Server, key, token string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, srv.URL+"/locks/"+key, nil)
	require.NoError(t, err)
	req.Header.Set("Lock-Token", token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
}

// holdToken opens a hold of key on srv and returns its events and token.
func holdToken(t *testing.T, srv *httptest.Server, key, body string) (<-chan sse, string) {
	t.Helper()
	resp, err := putHold(t.Context(), srv.URL+"/locks/"+key, body)
	ch := events(t, resp, err)
	acq := nextSSE(t, ch)
	require.Equal(t, "acquired", acq.name)
	var grant struct{ Token string }
	require.NoError(t, json.Unmarshal([]byte(acq.data), &grant))
	return ch, grant.Token
}

// finalEvent skips renewals to the hold's final event, within limit.
func finalEvent(t *testing.T, ch <-chan sse, limit time.Duration) (sse, time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		ev := nextSSE(t, ch)
		if ev.name != "renewed" {
			return ev, time.Since(start)
		}
		require.Less(t, time.Since(start), limit, "no final event within %v", limit)
	}
}

// TestHoldReleasedThroughThisGateway: the listing marks a held lock as
// held by a stream, and a plainly taken one not; the holder's DELETE
// through the hold's gateway ends its stream, released, at once: long
// before its next renewal (a third of its 30 s TTL) could tell.
func TestHoldReleasedThroughThisGateway(t *testing.T) {
	bothWays(t, testHoldReleasedThroughThisGateway)
}

func testHoldReleasedThroughThisGateway(t *testing.T, conns *handlers.HoldConns) {
	srv := holdGateway(t, memory.New(), conns)
	ch, token := holdToken(t, srv, "jobs/held", `{"ttl_ms":30000}`)
	resp, err := http.DefaultClient.Do(mustRequest(t, http.MethodPut, srv.URL+"/locks/jobs/plain"))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, map[string]bool{"jobs/held": true, "jobs/plain": false}, heldByStream(t, srv))

	deleteLock(t, srv, "jobs/held", token)
	ev, took := finalEvent(t, ch, 2*time.Second)
	assert.Equal(t, "released", ev.name, ev.data)
	assert.JSONEq(t, `"released"`, jsonField(t, ev.data, "reason"))
	assert.Less(t, took, 2*time.Second, "at once, not at the next renewal")
}

// TestHoldReleasedThroughAnotherGateway: two gateways on one store; only
// the hold's own gateway marks its lock as held by a stream, and the
// holder's DELETE through the other ends the stream released (not lost)
// at the hold's next renewal, within a third of its TTL.
func TestHoldReleasedThroughAnotherGateway(t *testing.T) {
	bothWays(t, testHoldReleasedThroughAnotherGateway)
}

func testHoldReleasedThroughAnotherGateway(t *testing.T, conns *handlers.HoldConns) {
	store := memory.New()
	here, there := holdGateway(t, store, conns), holdGateway(t, store, nil)
	ch, token := holdToken(t, here, "jobs/held", `{"ttl_ms":900}`)
	assert.Equal(t, map[string]bool{"jobs/held": true}, heldByStream(t, here))
	assert.Equal(t, map[string]bool{"jobs/held": false}, heldByStream(t, there), "another gateway does not know the hold")

	deleteLock(t, there, "jobs/held", token)
	ev, took := finalEvent(t, ch, 3*time.Second)
	assert.Equal(t, "released", ev.name, ev.data)
	assert.JSONEq(t, `"released"`, jsonField(t, ev.data, "reason"))
	t.Logf("released %v after the DELETE through the other gateway", took.Round(time.Millisecond))
	assert.Empty(t, heldByStream(t, here), "free")
}

func mustRequest(t *testing.T, method, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	return req
}

// jsonField is the raw JSON of data's field name.
func jsonField(t *testing.T, data, name string) string {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(data), &m))
	return string(m[name])
}
