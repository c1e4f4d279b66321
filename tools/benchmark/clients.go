package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
)

// client is one load client: it runs acquire+release cycles, one at a time.
type client interface {
	// cycle acquires the client's key and releases it. It reports the
	// row's latency (the whole cycle, or for a waiting row the wait for the
	// grant) and, when they happened, when the grant arrived and when the
	// release was sent.
	cycle(ctx context.Context) (cycleResult, error)
	close()
}

type cycleResult struct {
	latency   time.Duration
	granted   time.Time // zero when nothing was granted
	releasing time.Time // zero when no release was sent
}

// ttlMs is the lease the HTTP clients ask for: long enough never to expire
// within a cycle, short enough that a lock left behind by an aborted cycle
// is gone before anybody looks.
const ttlMs = 10000

// lockClient speaks the gateway's API (and the baseline's subset of it):
// PUT /locks/{key} → 201 with a token, DELETE /locks/{key} with Lock-Token
// → 204.
type lockClient struct {
	conn *httpConn
	key  string
	path string
	body []byte
	// shared: every client of the row uses this key, and the row measures
	// the wait for the grant, not the cycle.
	shared bool
	moves  int
}

func newLockClient(addr, key string, shared bool, waitMs int) *lockClient {
	c := &lockClient{conn: newHTTPConn(addr), key: key, path: "/locks/" + key, shared: shared}
	if waitMs > 0 {
		c.body = fmt.Appendf(nil, `{"ttl_ms":%d,"wait_ms":%d}`, ttlMs, waitMs)
	} else {
		c.body = fmt.Appendf(nil, `{"ttl_ms":%d}`, ttlMs)
	}
	return c
}

func (c *lockClient) cycle(ctx context.Context) (cycleResult, error) {
	var r cycleResult
	start := time.Now()
	status, body, err := c.conn.do(ctx, http.MethodPut, c.path, c.body)
	if err != nil {
		c.moveKey()
		return r, fmt.Errorf("PUT: %w", err)
	}
	if status != http.StatusCreated {
		c.moveKey()
		return r, &statusError{op: "PUT", status: status, body: problemType(body)}
	}
	r.granted = time.Now()
	var lease struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(body, &lease); err != nil || lease.Token == "" {
		return r, fmt.Errorf("PUT: 201 without a token: %.100q", body)
	}
	r.releasing = time.Now()
	status, body, err = c.conn.do(ctx, http.MethodDelete, c.path, nil, "Lock-Token", lease.Token)
	if err == nil && status != http.StatusNoContent {
		err = &statusError{op: "DELETE", status: status, body: problemType(body)}
	} else if err != nil {
		err = fmt.Errorf("DELETE: %w", err)
	}
	if err != nil {
		// Counted as an error all the same; retrying with the same token
		// is safe, and keeps one failure from holding the key (and every
		// client waiting for it) until the lease runs out.
		_, _, _ = c.conn.do(ctx, http.MethodDelete, c.path, nil, "Lock-Token", lease.Token)
		c.moveKey()
		return r, err
	}
	if c.shared {
		r.latency = r.granted.Sub(start)
	} else {
		r.latency = time.Since(start)
	}
	return r, nil
}

// moveKey gives a client with a key of its own a fresh one after a
// failure, so that a lock left behind (a release that failed, a cycle cut
// off) costs one error, not one per cycle until its lease ends.
func (c *lockClient) moveKey() {
	if c.shared {
		return
	}
	c.moves++
	c.path = fmt.Sprintf("/locks/%s-%d", c.key, c.moves)
}

func (c *lockClient) close() { c.conn.close() }

// problemType is the slug of a problem+json type, to tell errors apart in
// the report without quoting whole bodies.
func problemType(body []byte) string {
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(body, &p) != nil || p.Type == "" {
		return ""
	}
	for i := len(p.Type) - 1; i >= 0; i-- {
		if p.Type[i] == '/' {
			return p.Type[i+1:]
		}
	}
	return p.Type
}

// storeClient calls a lockstore.Store directly, with the gateway's
// per-call deadline: the cost of the library and Redis without HTTP.
type storeClient struct {
	store   lockstore.Store
	key     string
	timeout time.Duration
}

func (c *storeClient) cycle(ctx context.Context) (cycleResult, error) {
	var r cycleResult
	start := time.Now()
	callCtx, cancel := context.WithTimeout(ctx, c.timeout)
	token := lockstore.NewToken()
	_, err := c.store.Acquire(callCtx, c.key, lockstore.AcquireRequest{Token: token, TTL: ttlMs * time.Millisecond})
	cancel()
	if err != nil {
		return r, fmt.Errorf("Acquire: %w", err)
	}
	r.granted, r.releasing = time.Now(), time.Now()
	callCtx, cancel = context.WithTimeout(ctx, c.timeout)
	err = c.store.Release(callCtx, c.key, token)
	cancel()
	if err != nil {
		return r, fmt.Errorf("Release: %w", err)
	}
	r.latency = time.Since(start)
	return r, nil
}

func (c *storeClient) close() {}

// etcdClient uses etcd v3's lock service through its JSON gateway: one
// lease per client, granted before the run, then POST /v3/lock/lock (which
// blocks while another holds the name) and /v3/lock/unlock per cycle.
type etcdClient struct {
	conn  *httpConn
	lease string
	name  string // base64 of the lock name
	waits bool
}

func newEtcdClient(ctx context.Context, addr, key string, leaseTTL time.Duration, waits bool) (*etcdClient, error) {
	c := &etcdClient{conn: newHTTPConn(addr), name: base64.StdEncoding.EncodeToString([]byte(key)), waits: waits}
	var grant struct {
		ID string `json:"ID"`
	}
	body := fmt.Appendf(nil, `{"TTL":%d}`, int64(leaseTTL/time.Second))
	if err := c.post(ctx, "/v3/lease/grant", body, &grant); err != nil {
		c.conn.close()
		return nil, err
	}
	if grant.ID == "" {
		c.conn.close()
		return nil, fmt.Errorf("etcd granted a lease without an ID")
	}
	c.lease = grant.ID
	return c, nil
}

func (c *etcdClient) post(ctx context.Context, path string, body []byte, out any) error {
	status, resp, err := c.conn.do(ctx, http.MethodPost, path, body)
	if err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	if status != http.StatusOK {
		return &statusError{op: "POST " + path, status: status, body: fmt.Sprintf("%.120s", resp)}
	}
	if out != nil {
		if err := json.Unmarshal(resp, out); err != nil {
			return fmt.Errorf("POST %s: %w", path, err)
		}
	}
	return nil
}

func (c *etcdClient) cycle(ctx context.Context) (cycleResult, error) {
	var r cycleResult
	start := time.Now()
	var lock struct {
		Key string `json:"key"`
	}
	body := []byte(`{"name":"` + c.name + `","lease":"` + c.lease + `"}`)
	if err := c.post(ctx, "/v3/lock/lock", body, &lock); err != nil {
		return r, err
	}
	if lock.Key == "" {
		return r, fmt.Errorf("POST /v3/lock/lock: no key in the answer")
	}
	r.granted = time.Now()
	r.releasing = r.granted
	unlock := []byte(`{"key":"` + lock.Key + `"}`)
	if err := c.post(ctx, "/v3/lock/unlock", unlock, nil); err != nil {
		// Counted all the same; one retry keeps the key from staying
		// locked under this client's lease for the rest of the run.
		_ = c.post(ctx, "/v3/lock/unlock", unlock, nil)
		return r, err
	}
	if c.waits {
		r.latency = r.granted.Sub(start)
	} else {
		r.latency = time.Since(start)
	}
	return r, nil
}

// close revokes the lease, which deletes any lock key (held or queued) the
// client still has, so an aborted blocking lock leaves nothing behind.
func (c *etcdClient) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// Lease IDs pass 2^53: they go as strings, as protobuf's JSON allows.
	_ = c.post(ctx, "/v3/lease/revoke", []byte(`{"ID":"`+c.lease+`"}`), nil)
	c.conn.close()
}
