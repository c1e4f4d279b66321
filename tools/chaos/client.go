package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Client makes lock requests over HTTP and turns each into an Op.
type Client struct {
	http *http.Client
}

// NewClient returns a client with connections enough for many concurrent
// requests to a few gateways. It has no overall timeout: every request
// carries its own, and a request that runs out is an abandoned one.
func NewClient() *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 512
	tr.MaxIdleConnsPerHost = 256
	return &Client{http: &http.Client{Transport: tr}}
}

// Close drops idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Acquire sends PUT /locks/{key} with the caller's own token (so an
// abandoned request cannot hand out a token nobody knows) and waits up to
// timeout for the answer.
func (c *Client) Acquire(base, key, token string, ttl, wait, timeout time.Duration) Op {
	body := fmt.Sprintf(`{"ttl_ms":%d`, ttl.Milliseconds())
	if wait > 0 {
		body += fmt.Sprintf(`,"wait_ms":%d`, wait.Milliseconds())
	}
	body += "}"
	op := Op{Kind: Acquire, Key: key, Token: token, TTL: ttl}
	c.do(&op, http.MethodPut, base, body, timeout)
	return op
}

// Extend sends PATCH /locks/{key}.
func (c *Client) Extend(base, key, token string, ttl, timeout time.Duration) Op {
	op := Op{Kind: Extend, Key: key, Token: token, TTL: ttl}
	c.do(&op, http.MethodPatch, base, fmt.Sprintf(`{"ttl_ms":%d}`, ttl.Milliseconds()), timeout)
	return op
}

// Release sends DELETE /locks/{key}.
func (c *Client) Release(base, key, token string, timeout time.Duration) Op {
	op := Op{Kind: Release, Key: key, Token: token}
	c.do(&op, http.MethodDelete, base, "", timeout)
	return op
}

func (c *Client) do(op *Op, method, base, body string, timeout time.Duration) {
	c.doAt(op, method, base+"/locks/"+op.Key, body, timeout)
}

// doAt is do on url: a lock's or a semaphore's.
func (c *Client) doAt(op *Op, method, url, body string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = bytes.NewReader([]byte(body))
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		panic(err) // a malformed URL: the harness's own mistake
	}
	req.Header.Set("Lock-Token", op.Token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}

	op.Call = now()
	resp, err := c.http.Do(req)
	if err != nil {
		op.Return = now()
		op.Result = Unknown
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	op.Return = now()
	op.Status = resp.StatusCode
	if err != nil { // the answer was cut off: as good as none
		op.Result, op.Status = Unknown, 0
		return
	}
	op.Result = classify(op.Kind, resp.StatusCode)
	switch op.Result {
	case Granted, Renewed, Extended:
		var lease struct {
			Fence     int64  `json:"fence"`
			ExpiresAt string `json:"expires_at"`
		}
		exp, perr := time.Time{}, json.Unmarshal(b, &lease)
		if perr == nil {
			exp, perr = time.Parse(time.RFC3339Nano, lease.ExpiresAt)
		}
		if perr != nil || lease.Fence <= 0 {
			// A success the client cannot read is no success to it.
			op.Result = Rejected
			return
		}
		op.Fence, op.Expires = lease.Fence, exp.UnixNano()
	}
}

func classify(kind Kind, status int) Result {
	switch {
	case status == http.StatusCreated && kind == Acquire:
		return Granted
	case status == http.StatusOK && kind == Acquire:
		return Renewed
	case status == http.StatusOK && kind == Extend:
		return Extended
	case status == http.StatusNoContent && kind == Release:
		return Released
	case status == http.StatusConflict:
		return Held
	case status == http.StatusNotFound:
		return NotHeld
	case status == http.StatusPreconditionFailed:
		return Mismatch
	case status >= 500:
		return Unknown
	}
	return Rejected
}

// String renders an op for logs: "c3 acquire k1 → granted f=123 (201)".
func (op Op) String() string {
	s := "c" + strconv.Itoa(op.Client) + " g" + strconv.Itoa(op.Gateway) + " " + op.Kind.String() + " " + op.Key +
		" " + short(op.Token) + " " + stamp(op.Call) + "→" + stamp(op.Return) + " " + op.Result.String()
	if op.Fence != 0 {
		s += fmt.Sprintf(" fence=%d expires=%s", op.Fence, stamp(op.Expires))
	}
	return s
}

func short(token string) string {
	if len(token) > 6 {
		return token[:6]
	}
	return token
}
