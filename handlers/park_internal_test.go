package handlers

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/memory"
	"github.com/lockgateway/lockgateway/middleware"
)

// parkGateway serves PUT and DELETE of locks as the server does: waiting
// acquires park (park.go), and their connections come back through
// conns.Returned().
func parkGateway(t *testing.T, stopping <-chan struct{}) (*httptest.Server, *Locks, *HoldConns, lockstore.Store) {
	t.Helper()
	store := memory.New()
	t.Cleanup(func() { _ = store.Close() })
	waits := NewWaits(16, nil, nil)
	locks := NewLocks(store, Limits{
		DefaultTTL: time.Minute, MaxTTL: time.Hour, MaxWait: time.Minute, MaxBodyBytes: 1 << 16,
		BackendTimeout: time.Second, Waits: waits,
	}, zerolog.Nop(), stopping, nil)
	conns := NewHoldConns(nil)
	locks.ServeHoldsOn(conns)
	mux := http.NewServeMux()
	mux.Handle("PUT /locks/", locks.Acquire())
	mux.Handle("DELETE /locks/", locks.Release())
	srv := httptest.NewUnstartedServer(middleware.RequestID(mux))
	srv.Config.ConnContext = ConnContext
	// As the server's: a header timeout well below the idle timeout.
	srv.Config.ReadHeaderTimeout, srv.Config.IdleTimeout = 300*time.Millisecond, time.Minute
	srv.Start()
	go func() { _ = srv.Config.Serve(conns.Returned(time.Minute)) }()
	t.Cleanup(srv.Close)
	return srv, locks, conns, store
}

func parkedCount(c *HoldConns) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.parked)
}

// take acquires key without waiting and returns its token.
func take(t *testing.T, srv *httptest.Server, key string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, srv.URL+"/locks/"+key, strings.NewReader(`{"ttl_ms":60000}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	return strings.Trim(resp.Header.Get("ETag"), `"`)
}

func let(t *testing.T, srv *httptest.Server, key, token string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, srv.URL+"/locks/"+key, nil)
	require.NoError(t, err)
	req.Header.Set("If-Match", `"`+token+`"`)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
}

// putText is a PUT of key with body, as written on the wire.
func putText(key, body string) string {
	return "PUT /locks/" + key + " HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

func TestParkedWaitIsAnsweredAndKeepsItsConnection(t *testing.T) {
	srv, locks, conns, _ := parkGateway(t, nil)
	holder := take(t, srv, "k")

	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	// A waiting acquire, and right behind it on the wire a second request
	// (pipelined), which must be answered after it, on the same connection.
	_, err = c.Write([]byte(putText("k", `{"ttl_ms":5000,"wait_ms":10000}`) + putText("other", `{"ttl_ms":5000}`)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return parkedCount(conns) == 1 }, 5*time.Second, 5*time.Millisecond,
		"the waiting acquire parked")
	assert.Equal(t, 1, locks.limits.Waits.Waiting(), "and counts as waiting")

	let(t, srv, "k", holder)
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	var lease struct {
		Key   string `json:"key"`
		Token string `json:"token"`
		Fence int64  `json:"fence"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&lease))
	resp.Body.Close()
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, "k", lease.Key)
	assert.Equal(t, `"`+lease.Token+`"`, resp.Header.Get("ETag"), "the grant's token as its ETag")
	assert.Equal(t, "/locks/k", resp.Header.Get("Location"))
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	assert.NotEmpty(t, resp.Header.Get("Date"))
	assert.NotEmpty(t, resp.Header.Get("X-Request-Id"), "the middlewares' headers, set before it parked")
	assert.False(t, resp.Close, "keep-alive: the connection goes back to net/http")

	resp, err = http.ReadResponse(br, nil)
	require.NoError(t, err, "the pipelined request is served on the same connection")
	resp.Body.Close()
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, "/locks/other", resp.Header.Get("Location"))

	// And a third request, sent after, too.
	_, err = c.Write([]byte(putText("third", `{"ttl_ms":5000}`)))
	require.NoError(t, err)
	resp, err = http.ReadResponse(br, nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, 0, parkedCount(conns))
	assert.Equal(t, 0, locks.limits.Waits.Waiting())
}

func TestParkedWaitRunsOut(t *testing.T) {
	srv, _, conns, _ := parkGateway(t, nil)
	take(t, srv, "k")
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte(putText("k", `{"ttl_ms":5000,"wait_ms":300}`)))
	require.NoError(t, err)
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusConflict, resp.StatusCode, "still held when the wait ran out")
	assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	assert.Eventually(t, func() bool { return parkedCount(conns) == 0 }, 5*time.Second, 5*time.Millisecond)
}

// A parked acquire whose client leaves gives its place up (the sweep sees
// the connection closed), and is never granted the lock.
func TestParkedWaitEndsWhenItsClientLeaves(t *testing.T) {
	srv, locks, conns, store := parkGateway(t, nil)
	holder := take(t, srv, "k")
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	_, err = c.Write([]byte(putText("k", `{"ttl_ms":60000,"wait_ms":60000}`)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return parkedCount(conns) == 1 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, c.Close())
	require.Eventually(t, func() bool { return parkedCount(conns) == 0 && locks.limits.Waits.Waiting() == 0 },
		3*parkSweep+time.Second, 10*time.Millisecond, "the sweep ended the wait")
	let(t, srv, "k", holder)
	_, err = store.Inspect(t.Context(), "k")
	assert.ErrorIs(t, err, lockstore.ErrNotHeld, "nobody holds it: the client that left was not granted it")
}

// The shutdown ends a parked wait with its answer, 503, at once.
func TestParkedWaitAnswersTheShutdown(t *testing.T) {
	stopping := make(chan struct{})
	srv, _, conns, _ := parkGateway(t, stopping)
	take(t, srv, "k")
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte(putText("k", `{"ttl_ms":5000,"wait_ms":60000}`)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return parkedCount(conns) == 1 }, 5*time.Second, 5*time.Millisecond)
	close(stopping)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	assert.NoError(t, conns.Wait(ctx), "the shutdown's wait for parked acquires ends")
}

// The connection of a parked acquire, answered, is idle as after any
// response: the next request may come up to the idle timeout later, not
// only within net/http's header timeout for a new connection.
func TestParkedConnectionKeepsTheIdleTimeout(t *testing.T) {
	srv, _, conns, _ := parkGateway(t, nil)
	holder := take(t, srv, "k")
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte(putText("k", `{"ttl_ms":5000,"wait_ms":10000}`)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return parkedCount(conns) == 1 }, 5*time.Second, 5*time.Millisecond)
	let(t, srv, "k", holder)
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	time.Sleep(3 * srv.Config.ReadHeaderTimeout)
	_, err = c.Write([]byte(putText("next", `{"ttl_ms":5000}`)))
	require.NoError(t, err)
	resp, err = http.ReadResponse(br, nil)
	require.NoError(t, err, "the connection was still open")
	resp.Body.Close()
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
}
