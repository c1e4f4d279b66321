package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/lockgateway/lockgateway/internal/sleep"
)

// rowSpec is one line of the table: what is measured and how its clients
// are made.
type rowSpec struct {
	id    string // for -rows
	no    string // its number in the table
	label string
	// contended rows put every client on one key and measure the wait for
	// the grant; the others give each client its own key and measure the
	// whole acquire+release cycle.
	contended bool
	// needsEtcd rows are skipped without an etcd binary.
	needsEtcd bool
	// onRedis rows load the one redis-server of rows 1 to 3 and 6a: the
	// commands it ran per cycle are counted (INFO commandstats).
	onRedis bool
	// flood rows (flood.go) run once each, after the others, on a gateway
	// of their own, and give two lines: the small client alone and beside
	// the flood.
	flood bool
	// extra rows (curve.go, memory.go, waiters.go, holds.go) run once
	// each, after everything else, and report in sections of their own.
	extra bool
	// clients makes n clients, client i on spec.key(prefix, i), and names
	// the gateway they load, if any.
	clients func(ctx context.Context, b *bench, spec rowSpec, n int, prefix string) ([]client, *target, error)
}

var rowSpecs = []rowSpec{
	{id: "gateway", no: "1", label: "gateway, Redis backend", onRedis: true, clients: gatewayClients},
	{id: "traced", no: "1t", label: "gateway, Redis backend, traced (OTLP)", onRedis: true, clients: tracedClients},
	{id: "baseline", no: "2", label: "baseline: net/http + go-redis, same Lua", onRedis: true, clients: baselineClients},
	{id: "lockstore", no: "3", label: "lockstore/redis.Store called directly", onRedis: true, clients: storeClients},
	{id: "redlock", no: "4", label: "gateway, Redlock over 5 masters", clients: redlockClients},
	{id: "sentinel", no: "4s", label: "gateway, Sentinel (master + 1 replica)", clients: sentinelClients(0)},
	{id: "sentinel-wait", no: "4w", label: "gateway, Sentinel, WAIT for 1 replica", clients: sentinelClients(1)},
	{id: "cluster", no: "4c", label: "gateway, Redis Cluster (3 masters)", clients: clusterClients(true)},
	{id: "cluster-noquota", no: "4d", label: "gateway, Redis Cluster, no per-user cap", clients: clusterClients(false)},
	{id: "etcd", no: "5", label: "etcd 3.4 lock API (JSON gateway)", needsEtcd: true, clients: etcdClients},
	{id: "contended", no: "6a", label: "contended: gateway, wait_ms", onRedis: true, contended: true, clients: gatewayClients},
	{id: "contended-etcd", no: "6b", label: "contended: etcd 3.4 blocking lock", contended: true, needsEtcd: true, clients: etcdClients},
	{id: "flood-locks", no: "7", flood: true},
	{id: "flood-waiters", no: "8", flood: true},
	{id: "flood-conns", no: "9", flood: true},
	{id: "curve", no: "10", label: "concurrency curve: gateway and baseline", extra: true},
	{id: "memory", no: "11", label: "Redis memory per held lock", extra: true},
	{id: "waiters", no: "12", label: "many waiters on one key", extra: true},
	{id: "holds", no: "13", label: "many holds, a key each (Redis)", extra: true},
	{id: "holds-redlock", no: "13r", label: "many holds, a key each (Redlock)", extra: true},
}

func rowIDs() []string {
	ids := make([]string, len(rowSpecs))
	for i, s := range rowSpecs {
		ids[i] = s.id
	}
	return ids
}

// rowNo is the number of the row id in the table.
func rowNo(id string) string {
	for _, s := range rowSpecs {
		if s.id == id {
			return s.no
		}
	}
	return id
}

// label names the row as the table shows it; the Redlock row says how many
// masters it really had.
func (s rowSpec) labelFor(cfg config) string {
	if s.id == "redlock" {
		return fmt.Sprintf("gateway, Redlock over %d masters", cfg.redlock)
	}
	return s.label
}

// key is client i's key: its own, or the one all contended clients share.
func (s rowSpec) key(prefix string, i int) string {
	if s.contended {
		return prefix + "/shared"
	}
	return fmt.Sprintf("%s/%d", prefix, i)
}

// runRows measures every row but the floods, in rounds that interleave
// them (takeTurns), then the floods.
func (b *bench) runRows(ctx context.Context, all []rowSpec) ([]row, error) {
	var specs, floodSpecs []rowSpec
	for _, spec := range all {
		if spec.flood {
			floodSpecs = append(floodSpecs, spec)
		} else {
			specs = append(specs, spec)
		}
	}
	rows := make([]row, len(specs))
	var turns []turn
	var measured []int // turns[j] is rows[measured[j]]'s
	for i, spec := range specs {
		rows[i] = b.newRow(spec)
		if rows[i].Skipped != "" {
			fmt.Fprintf(b.stderr, "lockbench: %-3s %s: %s\n", spec.no, rows[i].Label, rows[i].Skipped)
			continue
		}
		turns = append(turns, turn{spec: spec, clients: rows[i].Clients, label: fmt.Sprintf("%-3s %s", spec.no, rows[i].Label)})
		measured = append(measured, i)
	}
	ms, cpus, err := b.takeTurns(ctx, turns, b.cfg.duration, false)
	if err != nil {
		return nil, fmt.Errorf("row %w", err)
	}
	for j, i := range measured {
		rows[i].fill(ms[j], cpus[j])
	}
	for _, spec := range floodSpecs {
		fr, err := b.floodRows(ctx, spec)
		if err != nil {
			return nil, fmt.Errorf("row %s (%s): %w", spec.no, spec.id, err)
		}
		rows = append(rows, fr...)
	}
	return rows, nil
}

// turn is one system a series of rounds measures: its row, its clients,
// and what the progress lines call it.
type turn struct {
	spec    rowSpec
	clients int
	label   string
}

// takeTurns measures each of turns once a round, in b.cfg.rounds rounds
// that split total between them, and returns each one's measurement and
// CPU use over all rounds. Rounds interleave the systems in time, so that
// a burst of other work on the machine spreads over all of them instead of
// sinking one; with abba the order is reversed in every other round
// (gateway, baseline, baseline, gateway), so that a drift of the machine's
// speed weighs on both sides of a comparison alike.
func (b *bench) takeTurns(ctx context.Context, turns []turn, total time.Duration, abba bool) ([]measurement, []cpuUse, error) {
	ms := make([]measurement, len(turns))
	cpus := make([]cpuUse, len(turns))
	window := total / time.Duration(b.cfg.rounds)
	for round := range b.cfg.rounds {
		for j := range turns {
			k := j
			if abba && round%2 == 1 {
				k = len(turns) - 1 - j
			}
			fmt.Fprintf(b.stderr, "lockbench: %s", turns[k].label)
			if b.cfg.rounds > 1 {
				fmt.Fprintf(b.stderr, " (round %d/%d)", round+1, b.cfg.rounds)
			}
			m, cpu, err := b.runRound(ctx, turns[k].spec, turns[k].clients, window)
			if err != nil {
				fmt.Fprintln(b.stderr, ": failed")
				return nil, nil, fmt.Errorf("%s: %w", turns[k].label, err)
			}
			errs := 0
			for _, n := range m.errors {
				errs += n
			}
			fmt.Fprintf(b.stderr, ": %s/s, %d errors\n", thousands(float64(m.count)/window.Seconds()), errs)
			ms[k].add(m)
			cpus[k].add(cpu)
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
		}
	}
	return ms, cpus, nil
}

// newRow is the table line for spec, before any load.
func (b *bench) newRow(spec rowSpec) row {
	r := row{ID: spec.id, No: spec.no, Label: spec.labelFor(b.cfg), Measures: "cycle", Clients: b.cfg.concurrency}
	if spec.contended {
		r.Measures, r.Clients = "wait", b.cfg.contended
	}
	if spec.needsEtcd && b.etcdBin == "" {
		r.Skipped = "skipped: no etcd binary"
	}
	return r
}

// runRound loads spec's target for one warm-up and one window, with fresh
// clients on fresh keys, and reports what the machine spent meanwhile.
func (b *bench) runRound(ctx context.Context, spec rowSpec, clients int, window time.Duration) (measurement, cpuUse, error) {
	// A fresh prefix: no round meets another's locks or queues.
	prefix := fmt.Sprintf("bench/%s/%d", spec.id, time.Now().UnixNano())
	cs, t, err := spec.clients(ctx, b, spec, clients, prefix)
	if err != nil {
		return measurement{}, cpuUse{}, err
	}
	var profiled chan error
	if b.cfg.profileDir != "" && t != nil && t.proc != nil {
		profiled = make(chan error, 1)
		path := filepath.Join(b.cfg.profileDir, fmt.Sprintf("%s-%d.pprof", spec.id, time.Now().UnixNano()))
		go func() { profiled <- b.profileWindow(ctx, t.addr, path, window) }()
	}
	var calls map[string]int64
	if spec.onRedis {
		if calls, err = b.redisCalls(ctx); err != nil {
			return measurement{}, cpuUse{}, err
		}
	}
	before := b.sampleCPU()
	// Let the cycles running at the end finish: a waiting acquire may take
	// the whole wait_ms.
	drain := time.Duration(b.cfg.waitMs)*time.Millisecond + 5*time.Second
	m := drive(ctx, cs, b.cfg.warmup, window, drain)
	cpu := cpuBetween(before, b.sampleCPU())
	if spec.onRedis {
		after, err := b.redisCalls(ctx)
		if err != nil {
			return measurement{}, cpuUse{}, err
		}
		for name, n := range after {
			calls[name] = n - calls[name]
		}
		m.redisCalls = calls
	}
	if profiled != nil {
		if err := <-profiled; err != nil {
			fmt.Fprintf(b.stderr, " (no profile: %v)", err)
		}
	}
	for _, c := range cs {
		c.close()
	}
	if t != nil {
		t.stats.Cycles += m.total
	}
	return m, cpu, nil
}

func gatewayClients(ctx context.Context, b *bench, spec rowSpec, n int, prefix string) ([]client, *target, error) {
	t, err := b.redisGateway(ctx)
	if err != nil {
		return nil, nil, err
	}
	return lockClients(b, spec, n, prefix, t.addr), t, nil
}

func redlockClients(ctx context.Context, b *bench, spec rowSpec, n int, prefix string) ([]client, *target, error) {
	t, err := b.redlockGateway(ctx)
	if err != nil {
		return nil, nil, err
	}
	return lockClients(b, spec, n, prefix, t.addr), t, nil
}

func baselineClients(ctx context.Context, b *bench, spec rowSpec, n int, prefix string) ([]client, *target, error) {
	addr, err := b.baselineServer(ctx)
	if err != nil {
		return nil, nil, err
	}
	return lockClients(b, spec, n, prefix, addr), nil, nil
}

func lockClients(b *bench, spec rowSpec, n int, prefix, addr string) []client {
	waitMs := 0
	if spec.contended {
		waitMs = b.cfg.waitMs
	}
	clients := make([]client, n)
	for i := range clients {
		clients[i] = newLockClient(addr, spec.key(prefix, i), spec.contended, waitMs)
	}
	return clients
}

func storeClients(ctx context.Context, b *bench, spec rowSpec, n int, prefix string) ([]client, *target, error) {
	store, err := b.directStore(ctx)
	if err != nil {
		return nil, nil, err
	}
	clients := make([]client, n)
	for i := range clients {
		clients[i] = &storeClient{store: store, key: spec.key(prefix, i), timeout: backendTimeout}
	}
	return clients, nil, nil
}

func etcdClients(ctx context.Context, b *bench, spec rowSpec, n int, prefix string) ([]client, *target, error) {
	addr, err := b.etcdServer(ctx)
	if err != nil {
		return nil, nil, err
	}
	// Each lease outlives the row; revoking it at the end frees its locks.
	leaseTTL := b.cfg.warmup + b.cfg.duration + time.Minute
	var clients []client
	for i := range n {
		c, err := newEtcdClient(ctx, addr, spec.key(prefix, i), leaseTTL, spec.contended)
		if err != nil {
			for _, c := range clients {
				c.close()
			}
			return nil, nil, err
		}
		clients = append(clients, c)
	}
	return clients, nil, nil
}

// profileWindow fetches the gateway's CPU profile (LOCKGW_PPROF) over the
// measured window, which starts after the warm-up, into path.
func (b *bench) profileWindow(ctx context.Context, addr, path string, window time.Duration) error {
	sleep.For(ctx, b.cfg.warmup)
	secs := max(int(window.Round(time.Second)/time.Second), 1)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+10*time.Second)
	defer cancel()
	return fetchTo(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), path)
}

// fetchTo saves what a GET of url answers (200) in path.
func fetchTo(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
