package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// httpConn is one keep-alive HTTP/1.1 connection used by one load client at
// a time. It writes requests by hand and reads responses with
// http.ReadResponse: no connection pool, no per-connection goroutines, so
// the load generator spends as little of the machine's CPU as it can and
// every HTTP row pays the same client cost.
type httpConn struct {
	addr string
	conn net.Conn
	br   *bufio.Reader
	wbuf []byte
	// retryAfter is the last response's Retry-After, in seconds (0 when
	// it had none).
	retryAfter int
}

func newHTTPConn(addr string) *httpConn { return &httpConn{addr: addr} }

// statusError is a response with an unexpected status.
type statusError struct {
	op     string
	status int
	body   string
}

func (e *statusError) Error() string {
	if e.body == "" {
		return fmt.Sprintf("%s: %d", e.op, e.status)
	}
	return fmt.Sprintf("%s: %d %s", e.op, e.status, e.body)
}

// do sends one request and reads the whole response. hdr holds header
// name/value pairs. Any error closes the connection; the next call dials
// again. Ending ctx cuts a request in flight.
func (c *httpConn) do(ctx context.Context, method, path string, body []byte, hdr ...string) (int, []byte, error) {
	if c.conn == nil {
		d := net.Dialer{Timeout: 5 * time.Second}
		conn, err := d.DialContext(ctx, "tcp", c.addr)
		if err != nil {
			return 0, nil, err
		}
		c.conn, c.br = conn, bufio.NewReaderSize(conn, 4096)
	}
	conn := c.conn
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	status, respBody, keep, err := c.roundTrip(method, path, body, hdr)
	if !stop() || err != nil || !keep {
		// ctx ended (the deadline is now in the past), the exchange failed
		// or the server closes: this connection is done.
		c.close()
	}
	if err != nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return status, respBody, err
}

func (c *httpConn) roundTrip(method, path string, body []byte, hdr []string) (status int, respBody []byte, keep bool, err error) {
	w := c.wbuf[:0]
	w = append(w, method...)
	w = append(w, ' ')
	w = append(w, path...)
	w = append(w, " HTTP/1.1\r\nHost: "...)
	w = append(w, c.addr...)
	w = append(w, "\r\nUser-Agent: lockbench\r\n"...)
	if body != nil {
		w = append(w, "Content-Type: application/json\r\nContent-Length: "...)
		w = strconv.AppendInt(w, int64(len(body)), 10)
		w = append(w, "\r\n"...)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		w = append(w, hdr[i]...)
		w = append(w, ": "...)
		w = append(w, hdr[i+1]...)
		w = append(w, "\r\n"...)
	}
	w = append(w, "\r\n"...)
	w = append(w, body...)
	c.wbuf = w
	if _, err := c.conn.Write(w); err != nil {
		return 0, nil, false, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return 0, nil, false, err
	}
	c.retryAfter, _ = strconv.Atoi(resp.Header.Get("Retry-After"))
	respBody, err = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return 0, nil, false, err
	}
	return resp.StatusCode, respBody, !resp.Close, nil
}

func (c *httpConn) close() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn, c.br = nil, nil
	}
}
