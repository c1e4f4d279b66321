package server_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
)

// Holds on plain HTTP/1.1 connections are served on the connection itself,
// taken over from net/http (handlers/hold_conn.go). These tests hold
// through connections written by hand, so that they see the response as
// it is on the wire, and check what net/http no longer does for such a
// hold: its access line and metrics, its place under the connection cap,
// the shutdown's wait for it, and the release when its client goes.

// rawHold is a hold on a connection of its own.
type rawHold struct {
	t     *testing.T
	conn  *rawConn
	resp  *http.Response
	body  *bufio.Reader
	bytes int // the body's bytes read so far, chunk framing aside
}

// openRawHold sends PUT path (a hold) with body, and reads the response's
// head; it requires a 201.
func openRawHold(t *testing.T, base, path, body string) *rawHold {
	t.Helper()
	c := dialRaw(t, base)
	_, err := io.WriteString(c.conn, "PUT "+path+" HTTP/1.1\r\nHost: gateway\r\nAccept: text/event-stream\r\n"+
		"Content-Type: application/json\r\nContent-Length: "+itoa(len(body))+"\r\n\r\n"+body)
	require.NoError(t, err)
	require.NoError(t, c.conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(c.br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	h := &rawHold{t: t, conn: c, resp: resp}
	h.body = bufio.NewReader(countingReader{resp.Body, &h.bytes})
	return h
}

type countingReader struct {
	r io.Reader
	n *int
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += n
	return n, err
}

// next reads the stream's next event within 10 s (heartbeats skipped);
// ok is false when the body ended, as a chunked body ends (an unexpected
// EOF, a stream cut short, fails the test).
func (h *rawHold) next() (name string, data map[string]any, ok bool) {
	h.t.Helper()
	require.NoError(h.t, h.conn.conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	for {
		line, err := h.body.ReadString('\n')
		if errors.Is(err, io.EOF) && line == "" && name == "" {
			return "", nil, false
		}
		require.NoError(h.t, err, "reading the stream")
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			require.NoError(h.t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &data))
		case line == "" && name != "":
			return name, data, true
		}
	}
}

// final skips renewals to the hold's final event, then requires the body's
// end.
func (h *rawHold) final() (name string, data map[string]any) {
	h.t.Helper()
	for {
		name, data, ok := h.next()
		require.True(h.t, ok, "the stream ended without a final event")
		if name == "renewed" {
			continue
		}
		_, _, more := h.next()
		require.False(h.t, more, "nothing after the final event")
		return name, data
	}
}

// requestLines are the gateway's access lines for method on route.
func requestLines(t *testing.T, logs string, method, route string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(logs) {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["message"] == "request" && m["method"] == method && m["route"] == route {
			out = append(out, m)
		}
	}
	return out
}

// TestHoldOnItsConnectionIsLoggedAndMeasuredAtItsEnd: a hold taken over
// from net/http gets no access line and no request metric while it lasts,
// and one of each when it ends, with its status, its whole duration and
// every byte of its stream.
func TestHoldOnItsConnectionIsLoggedAndMeasuredAtItsEnd(t *testing.T) {
	t.Parallel()
	g := apitest.Start(t, nil)
	c := apitest.NewClient(g.URL)
	const series = `lockgw_http_request_duration_seconds_count{method="PUT",route="/locks/*",status="201"}`

	start := time.Now()
	h := openRawHold(t, g.URL, "/locks/"+apitest.Key(t), `{"ttl_ms":300,"max_hold_ms":700}`)
	assert.True(t, h.resp.Close, "the response says Connection: close: it was taken over")
	assert.Equal(t, []string{"chunked"}, h.resp.TransferEncoding)
	name, _, ok := h.next()
	require.True(t, ok)
	require.Equal(t, "acquired", name)
	m, _ := scrape(t, c)
	assert.Zero(t, m[series], "no request metric while the hold lasts")

	name, data := h.final()
	assert.Equal(t, "ended", name)
	assert.Equal(t, "max-hold", data["reason"])
	assert.True(t, h.conn.closedWithin(2*time.Second), "the connection closes with the stream")

	var lines []map[string]any
	require.Eventually(t, func() bool {
		lines = requestLines(t, g.Logs.String(), "PUT", "/locks/*")
		return len(lines) > 0
	}, 5*time.Second, 10*time.Millisecond, "an access line once the hold ended")
	// The line is written as the connection closes, after the last event
	// reached the client: what bounds its duration is when it was seen.
	seen := time.Since(start)
	time.Sleep(200 * time.Millisecond) // (JSON logs are flushed in batches: a second line would be here by now)
	lines = requestLines(t, g.Logs.String(), "PUT", "/locks/*")
	require.Len(t, lines, 1, "one access line for the hold")
	assert.Equal(t, float64(http.StatusCreated), lines[0]["status"])
	assert.Equal(t, float64(h.bytes), lines[0]["bytes"], "every byte of the stream")
	assert.GreaterOrEqual(t, lines[0]["duration_ms"], 700.0, "the whole hold (max_hold_ms)")
	assert.LessOrEqual(t, lines[0]["duration_ms"], float64(seen.Milliseconds()+1))

	m, _ = scrape(t, c)
	assert.Equal(t, 1.0, m[series], "one request metric, at the hold's end")
	assert.GreaterOrEqual(t, m[strings.Replace(series, "_count", "_sum", 1)], 0.7)
}

// TestHoldConnectionsCountUnderTheCap: a hold's connection, taken over from
// net/http, keeps its place under LOCKGW_MAX_CONNS until the hold ends.
func TestHoldConnectionsCountUnderTheCap(t *testing.T) {
	t.Parallel()
	g := apitest.Start(t, map[string]string{"LOCKGW_MAX_CONNS": "2"})
	// apitest.Start's /healthz probe left a keep-alive connection: drop
	// it, so that the cap counts only this test's.
	http.DefaultClient.CloseIdleConnections()

	a := openRawHold(t, g.URL, "/locks/"+apitest.Key(t)+"/a", `{"ttl_ms":30000}`)
	b := openRawHold(t, g.URL, "/locks/"+apitest.Key(t)+"/b", `{"ttl_ms":30000}`)
	for _, h := range []*rawHold{a, b} {
		name, _, ok := h.next()
		require.True(t, ok)
		require.Equal(t, "acquired", name)
		require.True(t, h.resp.Close, "taken over")
	}

	c := dialRaw(t, g.URL)
	c.send("GET", "/healthz", "")
	_, answered := c.answer(300 * time.Millisecond)
	assert.False(t, answered, "no room while both holds last")

	require.NoError(t, a.conn.conn.Close()) // a's client goes: its hold ends
	status, ok := c.answer(5 * time.Second)
	require.True(t, ok, "served once a hold's connection closed")
	assert.Equal(t, http.StatusOK, status)
}

// TestShutdownEndsHoldsOnTheirConnections: a gateway shutting down ends
// every hold served on its connection with its final event (shutdown),
// and waits for them to end before it stops.
func TestShutdownEndsHoldsOnTheirConnections(t *testing.T) {
	t.Parallel()
	g := apitest.Start(t, nil)
	holds := []*rawHold{
		openRawHold(t, g.URL, "/locks/"+apitest.Key(t), `{"ttl_ms":30000}`),
		openRawHold(t, g.URL, "/semaphores/"+apitest.Key(t), `{"ttl_ms":30000,"limit":2}`),
	}
	for _, h := range holds {
		name, _, ok := h.next()
		require.True(t, ok)
		require.Equal(t, "acquired", name)
		require.True(t, h.resp.Close, "taken over")
	}

	stopping := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- g.Stop() }()
	for _, h := range holds {
		name, data := h.final()
		assert.Equal(t, "ended", name)
		assert.Equal(t, "shutdown", data["reason"])
	}
	// Nothing but the shutdown could end them this soon: their first
	// renewal is 10 s away, their lease's end 30 s.
	assert.Less(t, time.Since(stopping), 5*time.Second, "ended at once")
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway did not stop")
	}
	for _, line := range []string{"/locks/*", "/semaphores/*"} {
		assert.Len(t, requestLines(t, g.Logs.String(), "PUT", line), 1, "%s: the hold's access line, written before the gateway stopped", line)
	}
}

// TestHoldOnItsConnectionReleasedWhenTheClientGoes: the client closing its
// connection frees the key at once (one backend call), not at a renewal,
// a heartbeat (15 s) or the lease's end (30 s).
func TestHoldOnItsConnectionReleasedWhenTheClientGoes(t *testing.T) {
	backends(t, func(t *testing.T, g *apitest.Gateway) {
		c := apitest.NewClient(g.URL)
		path := lockPath(apitest.Key(t))
		h := openRawHold(t, g.URL, path, `{"ttl_ms":30000}`)
		name, _, ok := h.next()
		require.True(t, ok)
		require.Equal(t, "acquired", name)
		require.True(t, h.resp.Close, "taken over")

		closed := time.Now()
		require.NoError(t, h.conn.conn.Close())
		require.Eventually(t, func() bool { return !held(t, c, path) }, 5*time.Second, 5*time.Millisecond,
			"the key is free once the client went away")
		t.Logf("free %v after the client closed its connection", time.Since(closed).Round(time.Millisecond))
	})
}

// TestHoldOnItsConnectionEndsAtItsDelete: the holder's DELETE through the
// hold's gateway ends the stream (released) at once, waking the hold
// where it waits in a read.
func TestHoldOnItsConnectionEndsAtItsDelete(t *testing.T) {
	t.Parallel()
	g := apitest.Start(t, nil)
	c := apitest.NewClient(g.URL)
	path := lockPath(apitest.Key(t))
	h := openRawHold(t, g.URL, path, `{"ttl_ms":30000}`)
	name, data, ok := h.next()
	require.True(t, ok)
	require.Equal(t, "acquired", name)
	require.True(t, h.resp.Close, "taken over")

	deleted := time.Now()
	require.Equal(t, http.StatusNoContent, c.Do(t, "DELETE", path, nil, "Lock-Token", data["token"].(string)).Status)
	name, data = h.final()
	assert.Equal(t, "released", name)
	assert.Equal(t, "released", data["reason"])
	// Its first renewal, which would find the key free, is 10 s away.
	assert.Less(t, time.Since(deleted), 5*time.Second, "ended at once")
}

// TestHoldOverTLSStaysWithNetHTTP: a hold over HTTPS is not taken over
// (crypto/tls keeps buffers of its own, so little would be saved): net/http
// serves it as before, on a connection it keeps alive.
func TestHoldOverTLSStaysWithNetHTTP(t *testing.T) {
	dir := t.TempDir()
	pool := x509.NewCertPool()
	pool.AddCert(selfSigned(t, dir, "tls", 1))
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	g := runGateway(t, "127.0.0.1", map[string]string{"LOCKGW_TLS_CERT": filepath.Join(dir, "tls.crt"), "LOCKGW_TLS_KEY": filepath.Join(dir, "tls.key")}, hc, "https")

	req, err := http.NewRequest("PUT", g.base+"/locks/tls/held", strings.NewReader(`{"ttl_ms":300}`))
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.False(t, resp.Close, "no Connection: close: net/http serves it")
	// Renewals come (the stream lives past its 300 ms TTL).
	sc := bufio.NewScanner(resp.Body)
	var events []string
	for len(events) < 3 && sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			events = append(events, name)
		}
	}
	assert.Equal(t, []string{"acquired", "renewed", "renewed"}, events)
}
