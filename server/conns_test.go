package server_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
)

// rawConn is one keep-alive connection whose requests are written by hand,
// so a test decides when each connection opens, idles and waits.
type rawConn struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
}

func dialRaw(t *testing.T, base string) *rawConn {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &rawConn{t: t, conn: conn, br: bufio.NewReader(conn)}
}

// send writes a request without reading the answer.
func (c *rawConn) send(method, path, body string) {
	c.t.Helper()
	req := method + " " + path + " HTTP/1.1\r\nHost: gateway\r\n"
	if body != "" {
		req += "Content-Type: application/json\r\nContent-Length: " + itoa(len(body)) + "\r\n"
	}
	_, err := io.WriteString(c.conn, req+"\r\n"+body)
	require.NoError(c.t, err)
}

// answer reads the next response within d; ok is false when none came.
func (c *rawConn) answer(d time.Duration) (status int, ok bool) {
	c.t.Helper()
	require.NoError(c.t, c.conn.SetReadDeadline(time.Now().Add(d)))
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		var ne net.Error
		require.True(c.t, errors.As(err, &ne) && ne.Timeout(), "read: %v", err)
		return 0, false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, true
}

// do sends a request and requires its answer.
func (c *rawConn) do(method, path, body string) int {
	c.t.Helper()
	c.send(method, path, body)
	status, ok := c.answer(10 * time.Second)
	require.True(c.t, ok, "%s %s: no answer", method, path)
	return status
}

// closedWithin reports whether the server closes the connection within d.
func (c *rawConn) closedWithin(d time.Duration) bool {
	c.t.Helper()
	require.NoError(c.t, c.conn.SetReadDeadline(time.Now().Add(d)))
	_, err := c.br.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return err != nil // EOF or reset: closed
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// TestConnectionCap: at LOCKGW_MAX_CONNS, a new connection takes the place
// of the one idle the longest; with none idle, it waits until one is.
func TestConnectionCap(t *testing.T) {
	t.Parallel()
	g := apitest.Start(t, map[string]string{"LOCKGW_MAX_CONNS": "2", "LOCKGW_MAX_WAIT": "10s"})
	path := "/locks/" + apitest.Key(t)
	// apitest.Start's /healthz probe left a keep-alive connection: drop
	// it, so that the cap counts only this test's.
	http.DefaultClient.CloseIdleConnections()

	a := dialRaw(t, g.URL)
	require.Equal(t, http.StatusCreated, a.do("PUT", path, `{"ttl_ms":1500}`)) // a is idle now

	// b and c wait for the lock (about 1.5 s): both connections active.
	b := dialRaw(t, g.URL)
	b.send("PUT", path, `{"wait_ms":5000}`)
	c := dialRaw(t, g.URL)
	c.send("PUT", path, `{"wait_ms":5000}`)
	assert.True(t, a.closedWithin(2*time.Second), "c took the place of a, the idle one")

	// d finds both places taken by waiting requests: it is not served yet.
	d := dialRaw(t, g.URL)
	d.send("GET", "/healthz", "")
	_, answered := d.answer(300 * time.Millisecond)
	assert.False(t, answered, "no room for d while b and c wait")

	// The lease ends; one waiter gets the lock, then goes idle, and d
	// takes its place.
	var first, second *rawConn
	for deadline := time.Now().Add(5 * time.Second); first == nil && time.Now().Before(deadline); {
		for _, w := range []*rawConn{b, c} {
			if status, ok := w.answer(50 * time.Millisecond); ok {
				require.Equal(t, http.StatusCreated, status)
				first = w
				break
			}
		}
	}
	require.NotNil(t, first, "a waiter was granted the lock")
	second = b
	if first == b {
		second = c
	}
	status, ok := d.answer(5 * time.Second)
	require.True(t, ok, "d is served once a waiter is idle")
	assert.Equal(t, http.StatusOK, status)
	assert.True(t, first.closedWithin(2*time.Second), "d took the idle waiter's place")
	assert.False(t, second.closedWithin(100*time.Millisecond), "the other waiter still waits")
}

// TestIdleTimeout: a keep-alive connection that sends nothing for
// LOCKGW_IDLE_TIMEOUT is closed; one that keeps sending is not.
func TestIdleTimeout(t *testing.T) {
	t.Parallel()
	g := apitest.Start(t, map[string]string{"LOCKGW_IDLE_TIMEOUT": "1s"})
	idle := dialRaw(t, g.URL)
	busy := dialRaw(t, g.URL)
	require.Equal(t, http.StatusOK, idle.do("GET", "/healthz", ""))
	start := time.Now()
	for time.Since(start) < 2500*time.Millisecond {
		require.Equal(t, http.StatusOK, busy.do("GET", "/healthz", ""), "a connection in use stays open")
		time.Sleep(300 * time.Millisecond)
	}
	assert.True(t, idle.closedWithin(time.Second), "the idle connection was closed")
}

// TestWaitingCap: with LOCKGW_MAX_WAITING acquires waiting, another acquire
// that would wait is refused at once (503 too-many-waiters, Retry-After 5);
// one that does not wait is not refused, and the place is free again once
// a waiter is done.
func TestWaitingCap(t *testing.T) {
	t.Parallel()
	g := apitest.Start(t, map[string]string{"LOCKGW_MAX_WAITING": "1"})
	c := apitest.NewClient(g.URL)
	path := "/locks/" + apitest.Key(t)
	held := c.Do(t, "PUT", path, nil)
	require.Equal(t, http.StatusCreated, held.Status)
	token, _ := held.JSON(t)["token"].(string)

	// The waiter tries until it is in the one place (a request of the
	// test's own may hold it for a moment: the scrape below does not).
	waited := make(chan *apitest.Response, 1)
	go func() {
		w := apitest.NewClient(g.URL)
		for {
			r, err := w.Try(t, "PUT", path, []byte(`{"wait_ms":10000}`), apitest.JSON...)
			if err != nil || r.Status != http.StatusServiceUnavailable {
				waited <- r
				return
			}
		}
	}()
	// Probing until one is refused could go on for ever on a loaded
	// machine: a probe that got in first waits its second out, and the
	// next one, sent the moment it ends, can beat the waiter to the place
	// again, for the whole 10 s of a loaded make test run. So wait until
	// the waiter is in, then probe once.
	require.Eventually(t, func() bool {
		series, _ := scrape(t, c)
		return series["lockgw_waiting_acquires"] == 1
	}, 10*time.Second, 10*time.Millisecond, "the waiter waits")
	r := c.Do(t, "PUT", path, nil, "Prefer", "wait=1")
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "a second waiter is refused once the first waits: %s", r.Body)
	assert.Equal(t, "too-many-waiters", r.ProblemType(t))
	assert.Equal(t, "5", r.Header.Get("Retry-After"))
	assert.Equal(t, http.StatusConflict, c.Do(t, "PUT", path, nil).Status, "an acquire that does not wait is answered as ever")
	series, _ := scrape(t, c)
	assert.Equal(t, float64(1), series["lockgw_waiting_acquires"])
	assert.GreaterOrEqual(t, series["lockgw_waiting_refused_total"], float64(1))
	assert.Positive(t, series["lockgw_connections_open"])

	require.Equal(t, http.StatusNoContent, c.Do(t, "DELETE", path, nil, "Lock-Token", token).Status)
	select {
	case r := <-waited:
		require.NotNil(t, r, "the waiter's request failed")
		assert.Equal(t, http.StatusCreated, r.Status, "the waiter got the lock")
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not granted the lock")
	}
	r = c.Do(t, "PUT", path, nil, "Prefer", "wait=1")
	assert.Equal(t, http.StatusConflict, r.Status, "its place is free again: this one waited, and timed out")
}
