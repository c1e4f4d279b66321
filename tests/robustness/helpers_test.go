// Package chaos_test is lockgateway's fault-injection suite. The full suite
// (build tag chaos, `make chaos`) runs real redis-server and gateway
// processes through every fault and writes docs/chaos-report.md; a smoke of it
// runs with every `go test` (smoke_test.go). The harness and the checkers
// live in tools/chaos.
package chaos_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/tools/chaos"
)

// stagedClient is the client number staged operations are recorded under,
// apart from the workload's.
const stagedClient = 1000

// stageTimeout is how long a staged acquire (a control's holder, the
// stale-write control's A and B) keeps trying: they set a stage, and no
// assertion is about how soon. 5 s ran out twice in make test runs on a
// loaded 2-core machine ("the holder never got jump", "B never got n"),
// each try answered 503 while the nodes missed their timeout.
const stageTimeout = 20 * time.Second

// acquireUntil acquires key through gateway gw with a fresh token until it
// is granted or the wall clock passes until (ns), recording every attempt.
func acquireUntil(c *chaos.Cluster, gw int, key string, ttl time.Duration, until int64) (chaos.Op, bool) {
	for time.Now().UnixNano() < until {
		op := c.Client.Acquire(c.URLs[gw], key, lockstore.NewToken(), ttl, 0, 2*time.Second)
		op.Client, op.Gateway = stagedClient, gw
		c.History.Add(op)
		if op.Result == chaos.Granted {
			return op, true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return chaos.Op{}, false
}

// release releases a staged lease and records it.
func release(c *chaos.Cluster, gw int, lease chaos.Op) chaos.Op {
	op := c.Client.Release(c.URLs[gw], lease.Key, lease.Token, 2*time.Second)
	op.Client, op.Gateway = stagedClient, gw
	c.History.Add(op)
	return op
}

// doubleGrant is the staged core of the unsafe controls: before sets the
// stage (may be nil), a holder H takes key through gateway hgw, fault
// breaks what H's lease rests on, and a second client Q tries through
// gateway qgw until H's lease ends. It reports whether Q was granted while
// H still held the key. Both release at the end.
func doubleGrant(t testing.TB, c *chaos.Cluster, hgw, qgw int, key string, ttl time.Duration, before, fault func()) bool {
	t.Helper()
	if before != nil {
		before()
	}
	h, ok := acquireUntil(c, hgw, key, ttl, time.Now().Add(stageTimeout).UnixNano())
	require.True(t, ok, "the holder never got %s", key)
	fault()
	q, granted := acquireUntil(c, qgw, key, ttl, h.Expires)
	granted = granted && q.Return < h.Expires // after H's lease it is no double grant
	if granted {
		time.Sleep(50 * time.Millisecond) // both believe they hold it for a while

		t.Logf("double grant on %s: H fence %d until %s, Q fence %d from %s",
			key, h.Fence, time.Unix(0, h.Expires).Format("15:04:05.000"), q.Fence, time.Unix(0, q.Return).Format("15:04:05.000"))
	}
	if q.Token != "" {
		release(c, qgw, q)
	}
	release(c, hgw, h)
	return granted
}

// staleWrite is the staged core of the no-fencing control: A takes key,
// reads the register, and stops (a GC pause) until past its lease; B takes
// the key, reads, writes and releases; then A wakes and writes. A fenced
// register refuses A's write; an unfenced one loses B's update.
func staleWrite(t testing.TB, c *chaos.Cluster, reg *chaos.Register, key string, ttl time.Duration) {
	t.Helper()
	a, ok := acquireUntil(c, 0, key, ttl, time.Now().Add(stageTimeout).UnixNano())
	require.True(t, ok, "A never got %s", key)
	av, ok := reg.Read(a.Fence)
	require.True(t, ok)
	time.Sleep(time.Until(time.Unix(0, a.Expires)) + 50*time.Millisecond) // A is paused past its lease
	b, ok := acquireUntil(c, 1, key, ttl, time.Now().Add(stageTimeout).UnixNano())
	require.True(t, ok, "B never got %s", key)
	if bv, ok := reg.Read(b.Fence); ok {
		reg.Write(b.Fence, bv+1)
	}
	release(c, 1, b)
	reg.Write(a.Fence, av+1) // A wakes up and writes
	release(c, 0, a)
}

// verdict checks a finished run and logs what it found. expect lists the
// checkers that must find something (a control); every other checker must
// find nothing, except those in tolerate.
func verdict(t testing.TB, c *chaos.Cluster, registers map[string]*chaos.Register, name string, expect, tolerate []string) chaos.Verdict {
	t.Helper()
	v := c.Check(registers, outDir(), name)
	t.Logf("%s; %d state samples", v.Summary(), c.State.Samples())
	for k, r := range registers {
		if s := r.Stats(); s.StaleReads+s.StaleWrites > 0 || k == "k" {
			t.Logf("register %s: %+v", k, s)
		}
	}
	by := v.ByChecker()
	shown := map[string]int{}
	for _, x := range v.Violations {
		if shown[x.Checker]++; shown[x.Checker] <= 5 {
			t.Logf("violation: %v", x)
		}
	}
	assert.Empty(t, v.Inconclusive, "linearizability check did not finish for these keys")
	defer func() {
		if t.Failed() {
			if path, err := dumpHistory(v.Ops, name); err == nil {
				t.Logf("history: %s", path)
			}
		}
	}()
	for _, checker := range chaos.Checkers {
		switch {
		case contains(expect, checker):
			assert.NotZero(t, by[checker], "the %s checker must catch this known-unsafe case", checker)
		case contains(tolerate, checker):
		default:
			assert.Zero(t, by[checker], "%s violations", checker)
		}
	}
	return v
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// outDir is where histories that fail the linearizability check are drawn.
func outDir() string {
	if d := os.Getenv("CHAOS_OUT"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "lockgateway-chaos")
}

func name(t testing.TB) string { return strings.ReplaceAll(t.Name(), "/", "-") }

// persistLock takes key and makes its lock key persistent on one node that
// holds it (an emulated bug, or an operator's PERSIST): the state checker
// must see it.
func persistLock(t testing.TB, c *chaos.Cluster, key string, ttl time.Duration) {
	t.Helper()
	_, ok := acquireUntil(c, 0, key, ttl, time.Now().Add(stageTimeout).UnixNano())
	require.True(t, ok)
	for _, n := range c.Nodes { // a Redlock grant may have missed a node
		if done, err := n.Client().Persist(context.Background(), "lockgw:{"+key+"}:lock").Result(); err == nil && done {
			return // never released: nobody learns it must be
		}
	}
	t.Fatalf("no node holds %s", key)
}

// dumpHistory writes a run's operations as JSON lines to outDir, for a
// failure to be studied.
func dumpHistory(ops []chaos.Op, name string) (string, error) {
	if err := os.MkdirAll(outDir(), 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(outDir(), name+".jsonl")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, op := range ops {
		if err := enc.Encode(op); err != nil {
			return "", err
		}
	}
	return path, nil
}
