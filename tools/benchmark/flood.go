package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgateway/lockgateway/internal/sleep"
)

// A flood row measures what one client can do to another (issue 13, item
// 4): a small client (-flood-clients keep-alive clients, acquire+release
// cycles on keys of their own) runs against a fresh gateway, first alone,
// then while another client holds something of the gateway's:
//
//   - locks:   -flood-locks leases with a one-hour TTL (memory backend);
//   - waiters: -flood-waiters acquires waiting on one held key (redis);
//   - conns:   -flood-conns idle keep-alive connections, each after one
//     GET /healthz (memory backend).
//
// The figure that matters is the gateway's CPU time per small-client cycle
// with the flood beside the same figure without it: how much dearer the
// flood makes everybody else's requests.
type flood struct {
	kind    string // locks, waiters or conns
	backend string // memory or redis
	what    string // the row's label, with %s for the flood's size
}

var floods = map[string]flood{
	"flood-locks":   {kind: "locks", backend: "memory", what: "+ another client's %s locks"},
	"flood-waiters": {kind: "waiters", backend: "redis", what: "+ another's %s waiting acquires"},
	"flood-conns":   {kind: "conns", backend: "memory", what: "+ another's %s idle connections"},
}

// size is how much of its kind the flood holds, from the configuration.
func (f flood) size(c config) int {
	switch f.kind {
	case "locks":
		return c.floodLocks
	case "waiters":
		return c.floodWaiters
	}
	return c.floodConns
}

// floodRows runs spec's flood: a fresh gateway, the small client alone,
// then beside the flood. It returns the two rows, quiet first.
func (b *bench) floodRows(ctx context.Context, spec rowSpec) ([]row, error) {
	f := floods[spec.id]
	quiet := row{ID: spec.id + "-quiet", No: spec.no + "a", Label: "small client alone, " + f.backend + " backend",
		Measures: "flood", Clients: b.cfg.floodClients, Flood: f.kind}
	loud := row{ID: spec.id, No: spec.no + "b", Label: fmt.Sprintf("  "+f.what, thousands(float64(f.size(b.cfg)))),
		Measures: "flood", Clients: b.cfg.floodClients, Flood: f.kind}

	// The per-user cap (10 000 by default) would stop the lock flood far
	// short of its size: the row measures what that many live locks cost
	// the others, as many users together can make them.
	backend := []string{"LOCKGW_BACKEND=memory", "LOCKGW_MAX_LOCKS_PER_USER=0"}
	if f.backend == "redis" {
		addr, err := b.redis(ctx)
		if err != nil {
			return nil, err
		}
		backend = []string{"LOCKGW_BACKEND=redis", "LOCKGW_REDIS_URL=redis://" + addr + "/0"}
	}
	gwName := "gateway (" + spec.id + ")"
	t, err := b.startGateway(ctx, gwName, backend...)
	if err != nil {
		return nil, err
	}
	defer b.stopTarget(t)

	measure := func(r *row) error {
		prefix := fmt.Sprintf("bench/%s/%d", spec.id, time.Now().UnixNano())
		cs := make([]client, b.cfg.floodClients)
		for i := range cs {
			cs[i] = newLockClient(t.addr, fmt.Sprintf("%s/%d", prefix, i), false, 0)
		}
		fmt.Fprintf(b.stderr, "lockbench: %-3s %s", r.No, r.Label)
		var profiled chan error
		if b.cfg.profileDir != "" && t.proc != nil {
			profiled = make(chan error, 1)
			path := filepath.Join(b.cfg.profileDir, fmt.Sprintf("%s-%d.pprof", r.ID, time.Now().UnixNano()))
			go func() { profiled <- b.profileWindow(ctx, t.addr, path, b.cfg.duration) }()
		}
		before := b.sampleCPU()
		m := drive(ctx, cs, b.cfg.warmup, b.cfg.duration, 5*time.Second)
		cpu := cpuBetween(before, b.sampleCPU())
		if profiled != nil {
			if err := <-profiled; err != nil {
				fmt.Fprintf(b.stderr, " (no profile: %v)", err)
			}
		}
		for _, c := range cs {
			c.close()
		}
		r.fill(m, cpu)
		r.GatewayCPU = r.CPUPerCycle[gwName]
		fmt.Fprintf(b.stderr, ": %s/s, gateway %.0f µs per cycle\n", thousands(r.PerSecond), r.GatewayCPU)
		return ctx.Err()
	}
	if err := measure(&quiet); err != nil {
		return nil, err
	}

	fctx, stopFlood := context.WithCancel(ctx)
	held := &atomic.Int64{}
	var wg sync.WaitGroup
	fmt.Fprintf(b.stderr, "lockbench: %-3s flooding: %s %s\n", loud.No, thousands(float64(f.size(b.cfg))), f.kind)
	start := time.Now()
	switch f.kind {
	case "locks":
		err = floodLocks(fctx, t.addr, "flood", f.size(b.cfg), held, nil)
	case "waiters":
		err = floodWaiters(fctx, &wg, t.addr, f.size(b.cfg), held)
	case "conns":
		err = floodConns(fctx, &wg, t.addr, f.size(b.cfg), held)
	}
	if err != nil {
		stopFlood()
		wg.Wait()
		return nil, fmt.Errorf("%s flood: %w", f.kind, err)
	}
	loud.FloodHeld = held.Load()
	fmt.Fprintf(b.stderr, "lockbench: %-3s the flood holds %s %s after %s\n", loud.No,
		thousands(float64(loud.FloodHeld)), f.kind, time.Since(start).Round(100*time.Millisecond))
	sleep.For(ctx, b.cfg.floodSettle) // let the heap and the waiters' refreshes settle
	if t.proc != nil {
		if rss, _, err := t.proc.rssKiB(); err == nil {
			loud.GatewayRSSMiB = mib(rss)
		}
	}
	err = measure(&loud)
	if h := held.Load(); h < loud.FloodHeld {
		loud.FloodHeld = h // what it still held at the end
	}
	stopFlood()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	return []row{quiet, loud}, nil
}

// stopTarget stops a gateway a flood row started for itself.
func (b *bench) stopTarget(t *target) {
	if t.stop != nil {
		_ = t.stop()
	}
	if t.proc != nil {
		t.proc.stop()
	}
}

// floodLocks takes n locks, <prefix>/1 to <prefix>/n, with a one-hour TTL
// over 16 connections and leaves them held; the gateway, stopped after the
// row, forgets them. With forwardedFor, lock i is taken for the client
// forwardedFor(i) names in X-Forwarded-For (a gateway that trusts the
// loopback proxy counts it against that user).
func floodLocks(ctx context.Context, addr, prefix string, n int, held *atomic.Int64, forwardedFor func(i int64) string) error {
	const conns = 16
	body := []byte(`{"ttl_ms":3600000}`)
	next := atomic.Int64{}
	refused := atomic.Int64{}
	errc := make(chan error, conns)
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			c := newHTTPConn(addr)
			defer c.close()
			for {
				i := next.Add(1)
				if i > int64(n) || ctx.Err() != nil {
					return
				}
				var hdr []string
				if forwardedFor != nil {
					hdr = []string{"X-Forwarded-For", forwardedFor(i)}
				}
				status, _, err := c.do(ctx, http.MethodPut, "/locks/"+prefix+"/"+strconv.FormatInt(i, 10), body, hdr...)
				switch {
				case err != nil:
					errc <- err
					return
				case status == http.StatusCreated:
					held.Add(1)
				default:
					// A quota, once there is one, refuses the rest: the
					// flood holds what it was allowed to.
					if refused.Add(1) > 1000 {
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// floodWaiters holds one key, then keeps n acquires waiting for it (each
// on a connection of its own, wait_ms 60 s, sent again when it ends). An
// acquire refused outright is sent again after its Retry-After (a second
// without one), as a client should. held counts the acquires sent and not
// yet answered.
func floodWaiters(ctx context.Context, wg *sync.WaitGroup, addr string, n int, held *atomic.Int64) error {
	const key = "/locks/flood/held"
	owner := newHTTPConn(addr)
	status, body, err := owner.do(ctx, http.MethodPut, key, []byte(`{"ttl_ms":3600000}`))
	owner.close()
	if err != nil || status != http.StatusCreated {
		return fmt.Errorf("hold the key: %d %s %v", status, body, err)
	}
	req := []byte(`{"ttl_ms":10000,"wait_ms":60000}`)
	for i := range n {
		wg.Go(func() {
			c := newHTTPConn(addr)
			defer c.close()
			// Spread the connections' first requests over a second.
			sleep.For(ctx, time.Duration(i)*time.Second/time.Duration(n))
			for ctx.Err() == nil {
				held.Add(1)
				status, _, err := c.do(ctx, http.MethodPut, key, req)
				held.Add(-1)
				if err != nil || status != http.StatusConflict {
					sleep.For(ctx, time.Duration(max(c.retryAfter, 1))*time.Second)
				}
			}
		})
	}
	// Let them all be sent and queued, or as many as the gateway takes.
	rampUp(ctx, n, held)
	sleep.For(ctx, time.Second)
	return ctx.Err()
}

// rampUp waits until the flood holds 90% of n, or has not grown for 2 s
// (the gateway takes no more), or 30 s have passed.
func rampUp(ctx context.Context, n int, held *atomic.Int64) {
	start := time.Now()
	most, grew := held.Load(), start
	for held.Load() < int64(n)*9/10 && time.Since(start) < 30*time.Second && ctx.Err() == nil {
		if h := held.Load(); h > most {
			most, grew = h, time.Now()
		} else if time.Since(grew) > 2*time.Second && time.Since(start) > 3*time.Second {
			return
		}
		sleep.For(ctx, 100*time.Millisecond)
	}
}

// floodConns keeps n connections open, each idle after one GET /healthz.
// A connection the server closes is opened again a second later. held
// counts the open ones.
func floodConns(ctx context.Context, wg *sync.WaitGroup, addr string, n int, held *atomic.Int64) error {
	open := func() (net.Conn, error) {
		d := net.Dialer{Timeout: 5 * time.Second}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: lockbench-flood\r\n\r\n")); err != nil {
			_ = conn.Close()
			return nil, err
		}
		br := bufio.NewReaderSize(conn, 1024)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			_ = conn.Close()
			return nil, err
		}
		_ = resp.Body.Close()
		_ = conn.SetDeadline(time.Time{})
		return conn, nil
	}
	for i := range n {
		wg.Go(func() {
			sleep.For(ctx, time.Duration(i)*2*time.Second/time.Duration(n))
			for ctx.Err() == nil {
				conn, err := open()
				if err != nil {
					sleep.For(ctx, time.Second)
					continue
				}
				held.Add(1)
				stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
				var one [1]byte
				_, _ = conn.Read(one[:]) // blocks until the server closes it, or ctx ends
				stop()
				_ = conn.Close()
				held.Add(-1)
				sleep.For(ctx, time.Second)
			}
		})
	}
	rampUp(ctx, n, held)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if held.Load() == 0 {
		return errors.New("no connection stayed open")
	}
	return nil
}
