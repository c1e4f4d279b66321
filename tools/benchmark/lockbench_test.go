package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/redistest"
)

// built builds a gateway and a baseline and answers lockbench's flags for
// them. A test calls it before its deadline starts: on a cold build cache,
// beside the other packages' tests, lockbench's own build took most of
// TestSmoke's two minutes, and its first gateway then missed the rest.
func built(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.CommandContext(t.Context(), "go", "build", "-o", dir+string(filepath.Separator),
		"github.com/lockgateway/lockgateway/cmd/lockgateway", "github.com/lockgateway/lockgateway/tools/benchmark/baseline").CombinedOutput()
	require.NoError(t, err, "go build\n%s", out)
	return []string{"-gateway-bin", filepath.Join(dir, "lockgateway"), "-baseline-bin", filepath.Join(dir, "baseline")}
}

// TestSmoke runs every row briefly with a few clients. It checks that each
// row produced numbers and no errors, and that the report, the JSON and
// the chart were written — never how fast anything was.
func TestSmoke(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "results.json")
	bins := built(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	var stdout, stderr bytes.Buffer
	err := run(ctx, append(bins,
		"-duration", "300ms", "-warmup", "50ms", "-rounds", "1",
		"-c", "4", "-contended-clients", "4",
		// The floods' plumbing, at a size that costs nothing.
		"-flood-clients", "2", "-flood-locks", "50", "-flood-waiters", "8", "-flood-conns", "8", "-flood-settle", "0",
		// Issue 17's rows, as small: two points of the curve, 1 000 locks,
		// 10 waiters.
		"-curve", "1,2", "-curve-duration", "100ms", "-memory-locks", "1000", "-waiters", "10", "-waiters-duration", "300ms",
		// Issue 28's: 20 holds, over a window longer than a renewal
		// interval (a third of the 5 s hold TTL), so each renews in it.
		"-holds", "20", "-holds-duration", "2500ms",
		"-redis-server", redistest.Binary(t),
		// Only plumbing is under test: on a machine busy with the other
		// packages' tests, Redlock's 50 ms per node could run out.
		"-gateway-env", "LOCKGW_REDLOCK_NODE_TIMEOUT=1s",
		"-out", out,
	), &stdout, &stderr)
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	t.Logf("\n%s", stdout.String())

	data, err := os.ReadFile(out)
	require.NoError(t, err)
	var res results
	require.NoError(t, json.Unmarshal(data, &res))

	haveEtcd := etcdBinary("") != ""
	var specs []rowSpec // as the rows come: a flood gives two
	for _, spec := range rowSpecs {
		if spec.extra {
			continue
		}
		specs = append(specs, spec)
		if spec.flood {
			specs = append(specs, spec)
		}
	}
	require.Len(t, res.Rows, len(specs), "every row is in the results")
	for i, r := range res.Rows {
		spec := specs[i]
		assert.Contains(t, r.ID, spec.id)
		assert.Contains(t, stdout.String(), r.Label, "the table lists row %s", r.No)
		if spec.needsEtcd && !haveEtcd {
			assert.Equal(t, "skipped: no etcd binary", r.Skipped, "row %s", r.No)
			continue
		}
		assert.Empty(t, r.Skipped, "row %s", r.No)
		assert.Positive(t, r.Count, "row %s counted cycles", r.No)
		assert.Positive(t, r.PerSecond, "row %s", r.No)
		assert.Positive(t, r.P50, "row %s", r.No)
		assert.GreaterOrEqual(t, r.P99, r.P50, "row %s", r.No)
		assert.Zero(t, r.Errors, "row %s errors: %v", r.No, r.ErrorKinds)
		if spec.contended {
			assert.NotNil(t, r.HandoffP50, "row %s reports handoffs", r.No)
		}
		if spec.flood {
			if r.ID == spec.id { // the flooded one
				assert.Positive(t, r.FloodHeld, "row %s: the flood held something", r.No)
			}
		}
	}
	assert.NotEmpty(t, res.Ratios)
	require.Len(t, res.Processes, 3, "the Redis gateway, traced and not, and the Redlock gateway")
	for _, p := range res.Processes {
		assert.Positive(t, p.RSSEndMiB, p.Name)
		assert.Positive(t, p.Cycles, p.Name)
		if assert.NotNil(t, p.GoroutinesAfter, p.Name) && assert.NotNil(t, p.GoroutinesBefore, p.Name) {
			assert.Positive(t, *p.GoroutinesAfter, p.Name)
		}
	}

	// The ratios open with issue 17's table, in its order, then issue
	// 30's Redis CPU row.
	var names []string
	for _, r := range res.Ratios {
		names = append(names, r.Name)
	}
	require.GreaterOrEqual(t, len(names), 8)
	assert.Equal(t, []string{
		"gateway / baseline, cycles/s",
		"gateway / baseline, CPU µs per cycle (gateway process)",
		"gateway / baseline, p99",
		"gateway / etcd 3.4, cycles/s",
		"Redlock-5 / single-Redis gateway, CPU per cycle",
		"Redlock-5 / gateway, cycles/s",
		"contended (4 clients, one key) gateway / etcd blocking lock, grants/s",
		"gateway / baseline, Redis CPU µs per cycle",
	}, names[:8])
	for _, r := range res.Ratios[:8] {
		if r.Note == "n/a: a row was not run" {
			assert.False(t, haveEtcd, "%s: only the etcd ratios go without figures", r.Name)
			continue
		}
		assert.NotNil(t, r.Value, r.Name)
		assert.NotNil(t, r.Met, r.Name)
	}

	// The concurrency curve: both systems at each count.
	require.Len(t, res.Curve, 4, "gateway and baseline at 1 and 2 clients")
	for _, p := range res.Curve {
		assert.Contains(t, curveSystems, p.ID)
		assert.Contains(t, []int{1, 2}, p.Clients)
		assert.Positive(t, p.Count, "%s at %d", p.ID, p.Clients)
		assert.Positive(t, p.P99, "%s at %d", p.ID, p.Clients)
		assert.Zero(t, p.Errors, "%s at %d: %v", p.ID, p.Clients, p.ErrorKinds)
		assert.Positive(t, serverCPU(&p), "%s at %d: the serving process's CPU", p.ID, p.Clients)
	}
	assert.Contains(t, stdout.String(), "10  concurrency curve")

	// Redis memory per lock: every lock held, each with its lock key.
	if assert.NotNil(t, res.Memory) {
		m := res.Memory
		assert.EqualValues(t, 1000, m.Locks)
		assert.Positive(t, m.BytesPerLock)
		assert.GreaterOrEqual(t, m.KeysPerLock, 1.0)
		assert.Positive(t, m.MemoryUsage["lockgw:{memory/1}:lock"], "MEMORY USAGE of the lock key: %v", m.MemoryUsage)
		assert.Positive(t, m.QuotaBytesPerLock, "the per-user cap is on, as by default")
	}

	// Many waiters: all ten waited, none saw an error, and the window's
	// commands were counted (the holder's gateway runs some at least).
	if assert.NotNil(t, res.Waiters) {
		w := res.Waiters
		assert.Equal(t, 10, w.Waiting)
		assert.Zero(t, w.Errors, "%v", w.ErrorKinds)
		assert.Positive(t, w.RSSWaitingKiB)
		assert.GreaterOrEqual(t, w.GoroutinesPerWaiter, 1.0, "at least the connection's goroutine each")
		assert.GreaterOrEqual(t, w.WindowSeconds, 0.3)
	}
	assert.Contains(t, stdout.String(), "12  many waiters")

	// Many holds, on Redis and on Redlock: every hold open and renewed
	// in the window, without an error, and the Redis servers' work
	// counted.
	require.Len(t, res.Holds, 2)
	for i, backend := range []string{"redis", "redlock"} {
		h := res.Holds[i]
		assert.Equal(t, backend, h.Backend)
		assert.Equal(t, 20, h.Open, backend)
		assert.Zero(t, h.Errors, "%s: %v", backend, h.ErrorKinds)
		assert.GreaterOrEqual(t, h.Renewed, int64(h.Holds), "%s: each hold renewed in the window", backend)
		assert.Positive(t, h.Scripts, backend)
		assert.Positive(t, h.ReadEvents, backend)
		assert.Positive(t, h.RSSHoldingKiB, backend)
		assert.EqualValues(t, 5000, h.TTLms, "%s: the gateway's default hold TTL", backend)
		assert.Contains(t, stdout.String(), "many holds ("+backend+")")
	}
	assert.Equal(t, 1, res.Holds[0].Nodes)
	assert.Equal(t, 5, res.Holds[1].Nodes)
	// Redis's round trips, through the relay: each at least one read of
	// the socket by Redis. Redlock's are not relayed.
	if assert.NotNil(t, res.Holds[0].RoundTrips) {
		assert.Positive(t, *res.Holds[0].RoundTrips)
		assert.LessOrEqual(t, *res.Holds[0].RoundTrips, res.Holds[0].ReadEvents)
	}
	assert.Nil(t, res.Holds[1].RoundTrips)

	svg, err := os.ReadFile(filepath.Join(dir, "results.svg"))
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(svg, []byte("<svg ")), "an SVG document")
	assert.Contains(t, string(svg), "gateway, Redis backend")
	assert.Contains(t, string(svg), "Concurrency curve")
	assert.Contains(t, string(svg), "<polyline", "the curve's lines")
}

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"unknown row", []string{"-rows", "gateway,nope"}},
		{"profile out of process", []string{"-cpuprofile", "cpu.pprof"}},
		{"profile dir in process", []string{"-in-process", "-profile-dir", "prof"}},
		{"bad gateway env", []string{"-gateway-env", "NOEQUALS"}},
		{"no rounds", []string{"-rounds", "0"}},
		{"no clients", []string{"-c", "0"}},
		{"too few Redlock nodes", []string{"-redlock-nodes", "2"}},
		{"no holds", []string{"-holds", "0"}},
		{"no holds window", []string{"-holds-duration", "0s"}},
		{"stray argument", []string{"extra"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig(tc.args, &bytes.Buffer{})
			assert.Error(t, err)
		})
	}
	c, err := parseConfig(nil, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, rowIDs(), c.rows)
	assert.Equal(t, 32, c.concurrency)
}

func TestHandoffs(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// One key: grant 0, release 2, grant 3, release 5, grant 9.
	grants := []time.Time{at(9), at(0), at(3)}
	releases := []time.Time{at(5), at(2)}
	got := handoffs(grants, releases, at(1), at(100))
	assert.Equal(t, []time.Duration{time.Millisecond, 4 * time.Millisecond}, got)
}

// TestCurveTakesTurns: in two rounds, a point of the curve loads the
// gateway, the baseline, the baseline again, then the gateway (ABBA), and
// reports each system once, over both rounds' cycles.
//
// It leaves the build to lockbench, as make bench does; TestSmoke, before
// it, built the same packages, so only their link is left.
func TestCurveTakesTurns(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	out := filepath.Join(t.TempDir(), "results.json")
	err := run(ctx, []string{
		"-rows", "curve", "-curve", "1", "-rounds", "2", "-curve-duration", "200ms", "-warmup", "50ms",
		"-etcd", "none", "-redis-server", redistest.Binary(t), "-out", out,
	}, &stdout, &stderr)
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	var order []string
	for _, line := range strings.Split(stderr.String(), "\n") {
		if _, rest, ok := strings.Cut(line, "10  curve: "); ok {
			system, _, _ := strings.Cut(rest, ",")
			order = append(order, system)
		}
	}
	assert.Equal(t, []string{"gateway", "baseline", "baseline", "gateway"}, order, "stderr:\n%s", stderr.String())
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	var res results
	require.NoError(t, json.Unmarshal(data, &res))
	require.Len(t, res.Curve, 2, "one point per system")
	for _, p := range res.Curve {
		assert.Positive(t, p.Count, p.ID)
		assert.InEpsilon(t, float64(p.Count)/0.2, p.PerSecond, 0.05, "%s: over both rounds' windows, 100 ms each", p.ID)
	}
}
