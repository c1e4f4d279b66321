//go:build chaos

package chaos_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/redlock"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/handlers"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/tools/chaos"
)

// The rows of issue 26's holes that need a cluster of their own: three
// nodes restarting one after the other (hole 1), two node lists side by
// side (hole 4), two nodes' clocks ahead (hole 3).

// nodesOnly starts n Redis nodes (on the clock shim when opts says so)
// and no gateway: the row adds its own with addGateway.
func nodesOnly(t *testing.T, opts chaos.ClusterOptions, n int) *chaos.Cluster {
	c := &chaos.Cluster{T: t, Opts: opts, Toxi: chaos.NewToxi(), History: &chaos.History{}, Client: chaos.NewClient(), State: chaos.NewState(opts.MaxTTL)}
	t.Cleanup(c.Client.Close)
	for range n {
		c.Nodes = append(c.Nodes, chaos.StartNode(t, opts.ClockShim))
	}
	return c
}

// gatewaySpec says which nodes a gateway lists and how it runs.
type gatewaySpec struct {
	nodes []int          // indexes into Cluster.Nodes, the gateway's LOCKGW_REDLOCK_URLS
	names map[int]string // LOCKGW_REDLOCK_NODE_NAMES overrides by node (default host:port/0)
	// prev, when set, makes a transition gateway (docs/safety.md, rule
	// T): LOCKGW_REDLOCK_PREVIOUS_URLS and _NODE_NAMES list these nodes,
	// named as names says.
	prev []int
	// inProcess, when set, starts the gateway in this process from its
	// env instead of the lockgateway binary.
	inProcess func(t testing.TB, env map[string]string) string
	ready     bool // wait for /readyz 200 (a gateway whose list is refused never is)
}

// addGateway is chaos.Cluster.AddGateway for a gateway with a node list of
// its own: it gets a link to every node (so Links[g][n] exists for every
// n) and lists those of spec.nodes.
func addGateway(c *chaos.Cluster, spec gatewaySpec) int {
	t := c.T
	var links []*chaos.Link
	var urls, names, prevURLs, prevNames []string
	for i, n := range c.Nodes {
		l := c.Toxi.Link(t, n.Addr())
		links = append(links, l)
		name := n.Addr() + "/0"
		if s := spec.names[i]; s != "" {
			name = s
		}
		if slices.Contains(spec.nodes, i) {
			urls = append(urls, l.URL())
			names = append(names, name)
		}
		if slices.Contains(spec.prev, i) {
			prevURLs = append(prevURLs, l.URL())
			prevNames = append(prevNames, name)
		}
	}
	env := map[string]string{
		"LOCKGW_BACKEND":            chaos.Redlock,
		"LOCKGW_MAX_TTL":            c.Opts.MaxTTL.String(),
		"LOCKGW_DEFAULT_TTL":        c.Opts.MaxTTL.String(),
		"LOCKGW_MAX_WAIT":           "5s",
		"LOCKGW_LOG_LEVEL":          "warn",
		"LOCKGW_SHUTDOWN_TIMEOUT":   "10s",
		"LOCKGW_BACKEND_TIMEOUT":    "1s",
		"LOCKGW_REDLOCK_URLS":       strings.Join(urls, ","),
		"LOCKGW_REDLOCK_NODE_NAMES": strings.Join(names, ","),
		"LOCKGW_RATE_LIMIT_WINDOW":  "0",
	}
	if spec.prev != nil {
		env["LOCKGW_REDLOCK_PREVIOUS_URLS"] = strings.Join(prevURLs, ",")
		env["LOCKGW_REDLOCK_PREVIOUS_NODE_NAMES"] = strings.Join(prevNames, ",")
	}
	maps.Copy(env, c.Opts.Env)
	c.Links = append(c.Links, links)
	var url string
	if spec.inProcess != nil {
		url = spec.inProcess(t, env)
	} else {
		g := chaos.StartGateway(t, c.Opts.Bin, env)
		c.Gateways = append(c.Gateways, g)
		url = g.URL
	}
	c.URLs = append(c.URLs, url)
	if spec.ready {
		if err := (&chaos.Gateway{URL: url}).Ready(10 * time.Second); err != nil {
			t.Fatalf("chaos: %v", err)
		}
	}
	return len(c.URLs) - 1
}

// unguardedGateway serves the lock routes in this process over a Redlock
// opened with redlock.Options.DisableRestartGuard, which the
// gateway's configuration does not expose: no run_id memory, and a node
// found without its marker is joined without rule Q's quarantine. It is
// what a restarted node counting too early looks like, for the control of
// restarts-idle.
func unguardedGateway(t testing.TB, env map[string]string) string {
	maxTTL, err := time.ParseDuration(env["LOCKGW_MAX_TTL"])
	require.NoError(t, err)
	nodeTimeout, err := time.ParseDuration(env["LOCKGW_REDLOCK_NODE_TIMEOUT"])
	require.NoError(t, err)
	rl, err := redlock.Open(strings.Split(env["LOCKGW_REDLOCK_URLS"], ","), redlock.Options{
		NodeTimeout: nodeTimeout, MaxTTL: maxTTL, NodeNames: strings.Split(env["LOCKGW_REDLOCK_NODE_NAMES"], ","),
		DisableRestartGuard: true,
	})
	require.NoError(t, err)
	limits := handlers.Limits{DefaultTTL: maxTTL, MaxTTL: maxTTL, MaxWait: 5 * time.Second, MaxBodyBytes: 1 << 16, BackendTimeout: time.Second}
	locks := handlers.NewLocks(rl, limits, zerolog.Nop(), nil, nil)
	r := chi.NewRouter()
	r.Put("/locks/*", locks.Acquire().ServeHTTP)
	r.Patch("/locks/*", locks.Extend().ServeHTTP)
	r.Delete("/locks/*", locks.Release().ServeHTTP)
	r.Get("/locks/*", locks.Inspect().ServeHTTP)
	r.Get("/readyz", handlers.Readyz(rl, chaos.Redlock, rl.Nodes, nil, time.Second, zerolog.Nop()).ServeHTTP)
	srv := httptest.NewServer(r)
	t.Cleanup(func() {
		srv.Close()
		_ = rl.Close()
	})
	return srv.URL
}

// --- restarts-idle (hole 1) ---

// threeNodes is the restarts-idle cluster: three nodes, two gateways
// listing all three (unguarded ones for the control).
func threeNodes(unguarded bool) func(t *testing.T, opts chaos.ClusterOptions) *chaos.Cluster {
	return func(t *testing.T, opts chaos.ClusterOptions) *chaos.Cluster {
		c := nodesOnly(t, opts, 3)
		for range 2 {
			spec := gatewaySpec{nodes: []int{0, 1, 2}, ready: true}
			if unguarded {
				spec.inProcess = unguardedGateway
			}
			addGateway(c, spec)
		}
		return c
	}
}

// restartsIdle stages hole 1 twice (nodes 0 and 1 hold the lease and
// restart, then 1 and 2), and reports how many stagings let Q in.
func restartsIdle(t *testing.T, r *run) int {
	r.at(time.Second)
	doubled := 0
	for i, s := range []struct{ a, b, cut int }{{0, 1, 2}, {1, 2, 0}} {
		if idleRestarts(t, r, fmt.Sprintf("s%d", i), s.a, s.b, s.cut) {
			doubled++
		}
	}
	r.notes = append(r.notes, fmt.Sprintf("restarts while idle: Q granted in %d of 2 stagings", doubled))
	return doubled
}

// idleRestarts is issue 26's hole 1 on three nodes: H takes key through
// gateway 0 while node cut is unreachable from it, so the lease rests on
// nodes a and b. Then b crashes (and stays down), a restarts empty and
// gateway 0 hears from it (an acquire of another key), b comes back empty
// while gateway 0 is idle (the workload goes through gateway 1), and after
// 400 ms of quiet Q tries key through gateway 0 until H's lease ends. It
// reports whether Q was granted while H held the key.
func idleRestarts(t *testing.T, r *run, key string, a, b, cut int) bool {
	require.NoError(t, r.Links[0][cut].Blackhole())
	h, ok := acquireUntil(r.Cluster, 0, key, r.Opts.MaxTTL, time.Now().Add(8*time.Second).UnixNano())
	r.Links[0][cut].Clear()
	require.True(t, ok, "H never got %s", key)
	r.Nodes[b].Kill()
	time.Sleep(150 * time.Millisecond)
	r.Nodes[a].Restart()
	time.Sleep(100 * time.Millisecond)
	poke := r.record(r.Client.Acquire(r.URLs[0], "poke", lockstore.NewToken(), ttl, 0, 2*time.Second), 0)
	if holds(poke) {
		release(r.Cluster, 0, poke)
	}
	time.Sleep(150 * time.Millisecond)
	r.Nodes[b].Start()
	time.Sleep(400 * time.Millisecond)
	from := time.Now().UnixNano()
	q, granted := acquireUntil(r.Cluster, 0, key, ttl, h.Expires)
	granted = granted && q.Return < h.Expires
	tries := map[int]int{}
	for _, op := range r.History.Ops() {
		if op.Key == key && op.Client == stagedClient && op.Kind == chaos.Acquire && op.Call >= from {
			tries[op.Status]++
		}
	}
	r.notes = append(r.notes, fmt.Sprintf("%s: H on nodes %d and %d; Q's tries through gateway 0 while H held it, by status: %v", key, a, b, tries))
	if granted {
		time.Sleep(50 * time.Millisecond) // both believe they hold it for a while
		t.Logf("%s: H fence %d on nodes %d and %d until %s; Q fence %d from %s", key, h.Fence, a, b,
			time.Unix(0, h.Expires).Format("15:04:05.000"), q.Fence, time.Unix(0, q.Return).Format("15:04:05.000"))
		release(r.Cluster, 0, q)
	}
	release(r.Cluster, 0, h)
	return granted
}

// --- nodeset-change (hole 4) ---

// nodeLists is the nodeset-change cluster: nodes a, b, c, d (0-3); old
// gateways 0 and 1 list {a,b,c} and mark the nodes; new gateways 2 and 3,
// started next to them as in a rolling deploy, list {a,b,d}. blind names
// d as c in the new gateways' LOCKGW_REDLOCK_NODE_NAMES: both lists then
// look alike to the node list check, the old rule (nothing checked).
func nodeLists(blind bool) func(t *testing.T, opts chaos.ClusterOptions) *chaos.Cluster {
	return func(t *testing.T, opts chaos.ClusterOptions) *chaos.Cluster {
		c := nodesOnly(t, opts, 4)
		for range 2 {
			addGateway(c, gatewaySpec{nodes: []int{0, 1, 2}, ready: true})
		}
		var names map[int]string
		if blind {
			names = map[int]string{3: c.Nodes[2].Addr() + "/0"}
		}
		for range 2 {
			addGateway(c, gatewaySpec{nodes: []int{0, 1, 3}, names: names, ready: blind})
		}
		return c
	}
}

// nodesetChange stages disjoint majorities 3 times while clients hammer
// old and new gateways, and reports how many stagings granted one key on
// both; it notes what the new gateways answered.
func nodesetChange(t *testing.T, r *run, blind bool) int {
	r.at(500 * time.Millisecond)
	if blind {
		// d joined the old list when the new gateways first reached it,
		// and sits out its quarantine (rule Q: LOCKGW_MAX_TTL plus drift).
		r.at(2 * time.Second)
	}
	doubled := 0
	for i := range 3 {
		if disjointMajorities(t, r, fmt.Sprintf("s%d", i)) {
			doubled++
		}
	}
	if !blind {
		releaseThroughNewList(t, r, "r0")
	}
	r.at(6 * time.Second)
	r.notes = append(r.notes, fmt.Sprintf("disjoint majorities: Q granted in %d of 3 stagings", doubled))

	counts := map[string]int{}
	for _, op := range r.History.Ops() {
		if op.Gateway >= 2 {
			counts[fmt.Sprintf("%s %d", op.Kind, op.Status)]++
		}
	}
	keys := slices.Sorted(maps.Keys(counts))
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, counts[k]))
	}
	r.notes = append(r.notes, "requests through the new gateways, by kind and status: "+strings.Join(parts, ", "))
	if !blind {
		put, ready, log := newListRefusal(t, r)
		c, d := r.Nodes[2].Addr()+"/0", r.Nodes[3].Addr()+"/0"
		names := func(s string) bool { return strings.Contains(s, c) && strings.Contains(s, d) }
		r.notes = append(r.notes, fmt.Sprintf("a new gateway's PUT: %s", put),
			fmt.Sprintf("a new gateway's /readyz names c and d: %v; its log does: %v", names(ready), names(log)))
		assert.True(t, names(ready) || names(log), "the node list refusal names the difference")
		for _, op := range r.History.Ops() {
			if op.Gateway >= 2 && holds(op) {
				t.Errorf("a new gateway granted %s while the nodes serve the old list: %v", op.Key, op)
				break
			}
		}
	}
	return doubled
}

// disjointMajorities: a is unreachable from the old gateways, b from the
// new ones. H takes key through old gateway 0 (its lease rests on b and
// c); Q tries it through new gateway 2 (a and d) until H's lease ends. It
// reports whether Q was granted while H held the key.
func disjointMajorities(t *testing.T, r *run, key string) bool {
	cuts := [][2]int{{0, 0}, {1, 0}, {2, 1}, {3, 1}} // [gateway, node]
	for _, c := range cuts {
		require.NoError(t, r.Links[c[0]][c[1]].Blackhole())
	}
	defer func() {
		for _, c := range cuts {
			r.Links[c[0]][c[1]].Clear()
		}
	}()
	h, ok := acquireUntil(r.Cluster, 0, key, r.Opts.MaxTTL, time.Now().Add(3*time.Second).UnixNano())
	if !ok {
		t.Logf("%s: H never got it", key)
		return false
	}
	q, granted := acquireUntil(r.Cluster, 2, key, ttl, h.Expires)
	granted = granted && q.Return < h.Expires
	if granted {
		time.Sleep(50 * time.Millisecond)
		t.Logf("%s: old gateway's H fence %d until %s; new gateway's Q fence %d from %s", key, h.Fence,
			time.Unix(0, h.Expires).Format("15:04:05.000"), q.Fence, time.Unix(0, q.Return).Format("15:04:05.000"))
	}
	if q.Token != "" {
		release(r.Cluster, 2, q)
	}
	release(r.Cluster, 0, h)
	return granted
}

// releaseThroughNewList: a is unreachable from the old gateways, so H's
// lease, taken through old gateway 0, rests on b and c, a majority of the
// list the nodes serve; H releases it through new gateway 2 while it is
// valid. A new gateway refuses acquires and extends (rule C), but a
// release runs without the check and counts over its own list {a,b,d}: it
// finds H's token on b alone and answers 404, "the lock is not held: it
// was never taken, was released, or expired", while H holds it and the
// lease stays on b and c until its TTL (the linearizability checker sees
// it). Then Q tries the key through old gateway 1: refused, the lease is
// still there.
func releaseThroughNewList(t *testing.T, r *run, key string) {
	require.NoError(t, r.Links[0][0].Blackhole())
	h, ok := acquireUntil(r.Cluster, 0, key, r.Opts.MaxTTL, time.Now().Add(3*time.Second).UnixNano())
	r.Links[0][0].Clear()
	require.True(t, ok, "H never got %s", key)
	rel := release(r.Cluster, 2, h)
	q := r.record(r.Client.Acquire(r.URLs[1], key, lockstore.NewToken(), ttl, 0, 2*time.Second), 1)
	again := release(r.Cluster, 0, h)
	r.notes = append(r.notes, fmt.Sprintf("%s: H's lease on b and c (fence %d, valid until %s); its DELETE through new gateway 2: %d %s at %s; then Q through old gateway 1: %d; H's DELETE through old gateway 0: %d",
		key, h.Fence, time.Unix(0, h.Expires).Format("15:04:05.000"), rel.Status, rel.Result, time.Unix(0, rel.Return).Format("15:04:05.000"), q.Status, again.Status))
	assert.NotEqual(t, chaos.NotHeld, rel.Result, "a DELETE of a valid lease answered 404 (not held) by a gateway with another node list")
	if holds(q) {
		release(r.Cluster, 1, q)
	}
}

// newListRefusal asks new gateway 2 for a lock and for /readyz and reads
// its log, to see what it tells a client and an operator.
func newListRefusal(t *testing.T, r *run) (put, ready, log string) {
	get := func(method, path string) string {
		req, err := http.NewRequestWithContext(context.Background(), method, r.URLs[2]+path, strings.NewReader(`{"ttl_ms":400}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Lock-Token", lockstore.NewToken())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return get(http.MethodPut, "/locks/probe"), get(http.MethodGet, "/readyz"), r.Gateways[2].Logs()
}

// --- clocks-offset (hole 3) ---

// clockOffset is how far ahead of the host (and the gateways) nodes 3 and
// 4 run: issue 26's 3 s.
const clockOffset = 3 * time.Second

// aheadNodes is the clocks-offset cluster: five nodes on the clock shim,
// 3 and 4 started 3 s ahead (an offset from their first moment, not a
// step), then two gateways.
func aheadNodes(t *testing.T, opts chaos.ClusterOptions) *chaos.Cluster {
	c := nodesOnly(t, opts, 5)
	for _, n := range c.Nodes[3:] {
		n.Kill()
		n.SetClock(clockOffset)
		n.Start()
	}
	for range 2 {
		c.AddGateway()
	}
	return c
}

// clocksOffset stages a sequential retry 3 times (up to 3 tries each) on
// nodes 3 and 4 ahead, while the workload (twins included) runs with those
// nodes slow from gateway 1; checkRetryFences then checks every answer.
func clocksOffset(t *testing.T, r *run) {
	for _, n := range []int{3, 4} {
		require.NoError(t, r.Links[1][n].Latency(50, 40)) // slow, now and then past the node timeout
	}
	r.at(500 * time.Millisecond)
	exercised := 0
	for i := range 3 {
		for try := range 3 {
			key := fmt.Sprintf("s%d-%d", i, try)
			if retryAfterAnswer(t, r, key, i) {
				exercised++
				break
			}
		}
	}
	r.notes = append(r.notes, fmt.Sprintf("retry after the answer: %d of 3 stagings ran as intended", exercised))
	assert.NotZero(t, exercised, "no staging ran as intended")
	r.at(6 * time.Second)
}

// retryAfterAnswer is issue 26's hole 3: what gateway 0 sends nodes 3 and
// 4 (3 s ahead) is held 300 ms (3 node timeouts), so H's PUT is granted on
// nodes 0-2 with fence F (201) and answered before its votes land on 3 and
// 4, where they make values with their own, higher votes. Once they have
// landed, H retries with its token through gateway 0 and then gateway 1,
// each sent after the previous answer: each must answer 200 with F (the
// run's checkRetryFences checks it). It reports whether the staging ran
// as intended (201, the late votes landed, the retries answered 200).
func retryAfterAnswer(t *testing.T, r *run, key string, i int) bool {
	warm(r, 0)
	for _, n := range []int{3, 4} {
		require.NoError(t, r.Links[0][n].Delay(300))
	}
	token := lockstore.NewToken()
	h := r.record(r.Client.Acquire(r.URLs[0], key, token, maxTTL, 0, 2*time.Second), 0)
	time.Sleep(time.Until(time.Unix(0, h.Call).Add(450 * time.Millisecond))) // the late votes land
	for _, n := range []int{3, 4} {
		r.Links[0][n].Clear()
	}
	if h.Result != chaos.Granted || h.Return-h.Call >= int64(300*time.Millisecond) {
		t.Logf("%s: H %s after %v (wanted a 201 before the slow nodes' votes landed)", key, h.Result,
			time.Duration(h.Return-h.Call).Round(time.Millisecond))
		if h.Fence != 0 {
			release(r.Cluster, 0, h)
		}
		return false
	}
	var values []string
	for _, n := range r.Nodes {
		v, _ := n.Client().Get(context.Background(), "lockgw:{"+key+"}:lock").Result()
		values = append(values, v)
	}
	first := r.record(r.Client.Acquire(r.URLs[i%2], key, token, maxTTL, 0, 2*time.Second), i%2)
	second := r.record(r.Client.Acquire(r.URLs[1-i%2], key, token, maxTTL, 0, 2*time.Second), 1-i%2)
	r.notes = append(r.notes, fmt.Sprintf("%s: H 201 fence %d; values on the nodes %q; retries: %s fence %d (gateway %d), %s fence %d (gateway %d)",
		key, h.Fence, values, first.Result, first.Fence, i%2, second.Result, second.Fence, 1-i%2))
	release(r.Cluster, 0, h)
	return first.Result == chaos.Renewed && second.Result == chaos.Renewed
}
