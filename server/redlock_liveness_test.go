package server_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
)

// Liveness of the Redlock backend through the gateway (issue 12): a paused
// minority of nodes costs a request at most one node timeout, a node that
// answers again counts again, and a gateway that says it is ready can take
// a burst. These run at the default node timeout (LOCKGW_REDLOCK_NODE_TIMEOUT
// unset, 50 ms), the configuration of the reports; redlockEnv's roomier
// 500 ms would hide what they look for.

// TestRedlockLivenessPausedNodeThenTwoDead is issue 12, item 5, over HTTP:
// one node SIGSTOPped for a second (twenty node timeouts) while 32 clients
// contend for a key, then resumed; then two other nodes are killed. The
// three nodes that answer are a majority, so every uncontended acquire
// afterwards must be granted. The report had 0 of 50 granted, each a 503
// "3 of 5 Redlock nodes did not answer".
//
// Why it needs 32 clients: a paused Redis still completes TCP handshakes
// (the kernel does) until its accept queue is full, 512 connections with
// Redis's default tcp-backlog of 511. Before nodes were marked down, every
// call to the paused node opened a connection (the one before was closed
// when its call timed out), so past about 512 + PoolSize calls during one
// pause dials timed out and go-redis's dial circuit breaker opened: every
// dial then fails at once until a probe, made once a second, succeeds, and
// the resumed node did not count for up to a second more. 32 clients make
// enough calls in a second to get there (8 do not); this test failed so,
// 0 of 50, on the code before the fix.
func TestRedlockLivenessPausedNodeThenTwoDead(t *testing.T) {
	t.Parallel()
	pausedNodeThenTwoDead(t, 32, time.Second)
}

// pausedNodeThenTwoDead runs issue 12, item 5 with the given number of
// contending clients and the given pause of node 2.
func pausedNodeThenTwoDead(t *testing.T, clients int, pause time.Duration) {
	nodes, env := redlockEnvDefaultPool(t, 5)
	delete(env, "LOCKGW_REDLOCK_NODE_TIMEOUT")
	g := apitest.Start(t, env)
	c := apitest.NewClient(g.URL)
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * clients}
	c.HTTP.Transport = tr
	// Connections the transport dialled but never used are new to the
	// gateway, and its shutdown waits 5 s for those: close them first.
	t.Cleanup(tr.CloseIdleConnections)
	waitReady(t, c)

	path := lockPath(apitest.Key(t))
	var (
		stats           sync.Map // "PUT 201", "PUT+wait 409", "DELETE 204", … → *atomic.Int32
		paused          atomic.Bool
		grantedInPause  atomic.Int32
		mu              sync.Mutex
		holder          *heldLease // the last lease granted and not yet released
		overlaps        []string
		stop            = make(chan struct{})
		wg              sync.WaitGroup
		acquireBodies   = []string{`{"ttl_ms":300}`, `{"ttl_ms":300,"wait_ms":300}`}
		acquireVariants = []string{"PUT", "PUT+wait"}
	)
	count := func(what string, status int) {
		n, _ := stats.LoadOrStore(fmt.Sprintf("%s %d", what, status), new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
	}
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	for i := range clients {
		wg.Go(func() {
			for !stopped() {
				v := rand.IntN(2)
				what := acquireVariants[v]
				r, err := c.Try(t, "PUT", path, []byte(acquireBodies[v]), apitest.JSON...)
				if err != nil {
					t.Errorf("client %d: %s: %v", i, what, err)
					return
				}
				count(what, r.Status)
				switch r.Status {
				case http.StatusCreated:
				case http.StatusConflict, http.StatusServiceUnavailable:
					time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
					continue
				default:
					t.Errorf("client %d: %s: %d %s", i, what, r.Status, r.Body)
					return
				}
				if paused.Load() {
					grantedInPause.Add(1)
				}
				l := r.JSON(t)
				expires, err := time.Parse(time.RFC3339Nano, l["expires_at"].(string))
				if err != nil {
					t.Errorf("client %d: expires_at: %v", i, err)
					return
				}
				mine := &heldLease{token: l["token"].(string), fence: int64(l["fence"].(float64)), expires: expires}

				// One holder at a time, judged conservatively: the
				// previous holder has not sent its release yet, and by
				// its expires_at its lease is still valid now, after ours
				// was granted.
				mu.Lock()
				if prev := holder; prev != nil && time.Now().Before(prev.expires) {
					overlaps = append(overlaps, fmt.Sprintf("fence %d granted while fence %d was valid until %s",
						mine.fence, prev.fence, prev.expires.Format(time.RFC3339Nano)))
				}
				holder = mine
				mu.Unlock()

				time.Sleep(30 * time.Millisecond)

				mu.Lock()
				if holder == mine {
					holder = nil
				}
				mu.Unlock()
				r, err = c.Try(t, "DELETE", path, nil, "Lock-Token", mine.token)
				if err != nil {
					t.Errorf("client %d: DELETE: %v", i, err)
					return
				}
				count("DELETE", r.Status)
				switch r.Status {
				case http.StatusNoContent:
				// The lease ran out before the release (a hold stretched
				// past 300 ms on a loaded machine), or too few nodes
				// answered the release in time: not what this test
				// judges.
				case http.StatusNotFound, http.StatusPreconditionFailed, http.StatusServiceUnavailable:
				default:
					t.Errorf("client %d: DELETE: %d %s", i, r.Status, r.Body)
					return
				}
			}
		})
	}

	time.Sleep(300 * time.Millisecond)
	nodes[2].Pause()
	paused.Store(true)
	pausedAt := time.Now()
	time.Sleep(pause)
	// On a loaded machine (the race detector, parallel tests, two cores)
	// the first second of the pause can pass without a grant, every round
	// missing the 50 ms node timeout: keep the node paused, within reason,
	// until one came, so that the test judges what it is about. A longer
	// pause only means more calls to the paused node.
	for grantedInPause.Load() == 0 && time.Since(pausedAt) < 10*pause {
		time.Sleep(10 * time.Millisecond)
	}
	paused.Store(false)
	nodes[2].Resume()
	pausedFor := time.Since(pausedAt)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()

	var summary []string
	stats.Range(func(k, v any) bool {
		summary = append(summary, fmt.Sprintf("%s: %d", k, v.(*atomic.Int32).Load()))
		return true
	})
	t.Logf("contention, %d clients, node 2 paused for %v: %s; %d granted during the pause",
		clients, pausedFor.Round(time.Millisecond), strings.Join(summary, ", "), grantedInPause.Load())
	assert.Empty(t, overlaps, "two holders at once")
	require.Positive(t, grantedInPause.Load(), "no grant while node 2 was paused: the clients did not contend through the pause")

	nodes[0].Kill()
	nodes[1].Kill()
	ok := 0
	var failures, retried []string
	start := time.Now()
	for i := range 50 {
		// A 503 is retried with the token it carries, as the contract
		// tells a client to, at most twice, two node timeouts apart, and
		// logged: on a loaded machine one call of a healthy node can miss
		// the 50 ms node timeout, and the node is then skipped until its
		// prober hears it (a few node timeouts). The reported failure, the
		// resumed node not counting for a second, fails all three.
		key := fmt.Sprintf("%s-free-%d", path, i)
		r := c.Do(t, "PUT", key, []byte(`{"ttl_ms":10000}`), apitest.JSON...)
		for try := 0; try < 2 && r.Status == http.StatusServiceUnavailable; try++ {
			detail, _ := r.Problem(t)["detail"].(string)
			retried = append(retried, detail)
			token, _ := r.Problem(t)["token"].(string)
			require.NotEmpty(t, token, "a 503 of an acquire carries its token: %s", r.Body)
			time.Sleep(100 * time.Millisecond)
			r = c.Do(t, "PUT", key, []byte(`{"ttl_ms":10000}`), append([]string{"Lock-Token", token}, apitest.JSON...)...)
		}
		if r.Status == http.StatusCreated || r.Status == http.StatusOK { // 200: the 503'd attempt had landed
			ok++
			continue
		}
		detail := ""
		if r.Status >= 400 {
			detail, _ = r.Problem(t)["detail"].(string)
		}
		failures = append(failures, fmt.Sprintf("%d %s", r.Status, detail))
	}
	t.Logf("nodes 0 and 1 dead, 2 resumed: %d of 50 acquires granted in %v; %d answered 503 and were retried with their token: %q",
		ok, time.Since(start).Round(time.Millisecond), len(retried), retried)
	if ok < 50 {
		t.Logf("readyz: %s", c.Do(t, "GET", "/readyz", nil).Body)
	}
	assert.Equal(t, 50, ok, "nodes 2, 3 and 4 answer, a majority: every acquire must be granted; failures: %q", failures)
}

type heldLease struct {
	token   string
	fence   int64
	expires time.Time
}

// TestRedlockLivenessColdBurst is issue 12, item 7, over HTTP: a freshly
// started gateway, once /readyz says it is ready, answers a burst of
// concurrent acquires on distinct free keys, all nodes healthy, with no
// 503. The report had 503 "5 of 5 Redlock nodes did not answer": requests
// queued for connections still being dialled, past the node timeout.
//
// The node timeout is the default, except under the race detector: there
// the gateway's and the client's own CPU work for the burst (200 HTTP
// requests, 1,000 node calls, on the same two cores as the five
// redis-servers) is several times slower, and a warm gateway, bursting
// again, fails the default too. So the budget is stretched by raceSlowdown
// there, as lockstore's TestRedlockColdBurst does: the test is about cold
// connections, not about how fast the race detector runs. The connections
// each node accepted during the burst are logged: none is the warm case,
// and many mean /readyz said ready with pools far from full (the warm-up
// runs under the 50 ms dial and read timeouts too, and on a loaded machine
// many of its dials time out).
func TestRedlockLivenessColdBurst(t *testing.T) {
	const burst = 200
	nodes, env := redlockEnvDefaultPool(t, 5)
	timeout := 50 * time.Millisecond // the default
	if raceSlowdown > 1 {
		timeout *= raceSlowdown
	}
	// A cold burst that fails is judged by what the nodes saw and by a
	// control: the same burst again on the same gateway, warm now. The
	// reported failure is a burst that meets cold pools: requests queue for
	// connections still being dialled. So when every node had at least half
	// of the connections the warm-up opens (its pool less the 16 it leaves
	// for arrivals, lockstore/redlock/redlock.go; on a loaded machine a few of
	// those dials time out) open when the burst began, or the warm burst
	// fails too, the failure is not that one: the machine is too busy for
	// this node timeout (parallel tests, another package's tests, two
	// cores), so the whole test runs again on a fresh gateway with the node
	// timeout (and the backend timeout) doubled, at most five times (up to
	// 16 times the default). A cold burst that failed on a node with fewer
	// connections open, with a warm one that passes, fails the test at once. (Connections dialled
	// during the burst do not tell: a burst of 200 may take the 16 left
	// for arrivals, and every call that times out closes its connection,
	// which the next call dials again.)
	var stats []*redis.Client
	for _, n := range nodes {
		stats = append(stats, n.Client())
	}
	warmPool := max(128, 10*runtime.GOMAXPROCS(0)) - 16 // what the warm-up opens
	for attempt := 1; ; attempt++ {
		env["LOCKGW_REDLOCK_NODE_TIMEOUT"] = timeout.String()
		// The deadline of a whole backend call (1 s by default) is
		// stretched with it: on a loaded machine the burst's 503s were that
		// one's, pools full, even at a node timeout of 3.2 s.
		env["LOCKGW_BACKEND_TIMEOUT"] = max(time.Second, 5*timeout).String()
		base := connectedClients(t, stats) // the earlier attempts' gateways', open till the end
		g := apitest.Start(t, env)
		c := apitest.NewClient(g.URL)
		tr := &http.Transport{MaxIdleConnsPerHost: burst}
		c.HTTP.Transport = tr
		t.Cleanup(tr.CloseIdleConnections)
		waitReady(t, c)
		open := connectedClients(t, stats) // this gateway's: its pools and its probes
		for i := range open {
			open[i] -= base[i]
		}

		key := apitest.Key(t) + "/" + strconv.Itoa(attempt)
		failures, dialled := coldBurst(t, g, c, nodes, key+"/cold", burst)
		if len(failures) == 0 {
			return
		}
		cold := slices.ContainsFunc(open, func(n int64) bool { return 2*n < int64(warmPool) })
		warmFailures, _ := coldBurst(t, g, c, nodes, key+"/warm", burst)
		if cold && len(warmFailures) == 0 || attempt == 5 {
			assert.Empty(t, failures, "every acquire granted at node timeout %v, backend timeout %s (connections open on each node as the burst began: %v, warm pool %d; %d dialled during it; warm, the same burst had %d failures)",
				timeout, env["LOCKGW_BACKEND_TIMEOUT"], open, warmPool, dialled, len(warmFailures))
			return
		}
		t.Logf("node timeout %v: %d failures with %v connections open on the nodes (warm pool %d), %d dialled, %d warm: the machine is too busy for it; again at %v on a fresh gateway",
			timeout, len(failures), open, warmPool, dialled, len(warmFailures), 2*timeout)
		timeout *= 2
	}
}

// coldBurst sends burst concurrent acquires on distinct free keys under
// key through g and returns the failures and how many connections the
// nodes accepted meanwhile, which it logs by node with the answers.
func coldBurst(t *testing.T, g *apitest.Gateway, c *apitest.Client, nodes []*redistest.Server, key string, burst int) (failures []string, dialledAll int64) {
	t.Helper()
	// Open the client's connections first, so that the burst is a burst of
	// requests, not of TCP handshakes: /healthz does not touch Redis.
	var wg sync.WaitGroup
	for range burst {
		wg.Go(func() {
			if _, err := c.Try(t, "GET", "/healthz", nil); err != nil {
				t.Errorf("GET /healthz: %v", err)
			}
		})
	}
	wg.Wait()
	var stats []*redis.Client
	for _, n := range nodes {
		stats = append(stats, n.Client())
	}
	before := acceptedConns(t, stats)

	// The burst is sent with a plain client and its responses are checked
	// against openapi.yaml after it: the checks cost the test's own CPU,
	// which the gateway shares, and would land inside the node timeouts.
	reqs := make([]*http.Request, burst)
	resps := make([]*apitest.Response, burst)
	for i := range burst {
		req, err := http.NewRequest("PUT", g.URL+fmt.Sprintf("%s/%d", lockPath(key), i), nil)
		require.NoError(t, err)
		reqs[i] = req
	}
	start := time.Now()
	for i := range burst {
		wg.Go(func() {
			resp, err := c.HTTP.Do(reqs[i])
			if err != nil {
				t.Errorf("PUT %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Errorf("PUT %d: %v", i, err)
				return
			}
			resps[i] = &apitest.Response{Status: resp.StatusCode, Header: resp.Header, Body: body}
		})
	}
	wg.Wait()
	took := time.Since(start)
	after := acceptedConns(t, stats)
	dialled := make([]int64, len(nodes))
	for i := range nodes {
		dialled[i] = after[i] - before[i]
		dialledAll += dialled[i]
	}
	byStatus := map[int]int{}
	for i, r := range resps {
		if r == nil {
			continue
		}
		apitest.CheckResponse(t, reqs[i], r)
		byStatus[r.Status]++
		if r.Status != http.StatusCreated {
			detail, _ := r.Problem(t)["detail"].(string)
			failures = append(failures, fmt.Sprintf("%d %s", r.Status, detail))
		}
	}
	t.Logf("burst of %d on %s: %v in %v; connections each node accepted meanwhile: %v",
		burst, key, byStatus, took.Round(time.Millisecond), dialled)
	return failures, dialledAll
}

// TestRedlockLivenessReadyOnlyWhenWarm: /readyz answers 503 until a
// majority of the Redlock nodes are warm (scripts loaded), even while
// every node answers. Warming is too quick to catch in the act, so the
// test holds it back: on three of the five nodes an ACL rule refuses
// SCRIPT LOAD, the one command only the warm-up sends (requests run their
// scripts by EVALSHA, falling back to EVAL). Allowed again, the warm-up's
// retries get through and the gateway becomes ready by itself.
func TestRedlockLivenessReadyOnlyWhenWarm(t *testing.T) {
	t.Parallel()
	nodes, env := redlockEnv(t, 5)
	delete(env, "LOCKGW_REDLOCK_NODE_TIMEOUT")
	acl := func(rule string) {
		for _, n := range nodes[:3] {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := n.Client().Do(ctx, "ACL", "SETUSER", "default", rule).Err()
			cancel()
			require.NoError(t, err)
		}
	}
	acl("-script|load")
	g := apitest.Start(t, env)
	c := apitest.NewClient(g.URL)

	for range 10 {
		r := c.Do(t, "GET", "/readyz", nil)
		require.Equal(t, http.StatusServiceUnavailable, r.Status, "ready with 3 of 5 nodes cold: %s", r.Body)
		assert.Equal(t, "backend-unavailable", r.ProblemType(t))
		time.Sleep(50 * time.Millisecond)
	}
	for i, n := range nodes {
		assert.True(t, redistest.Ping(n.Addr()), "node %d answers PING", i)
	}

	acl("+script|load")
	require.Eventually(t, func() bool { return c.Do(t, "GET", "/readyz", nil).Status == http.StatusOK },
		10*time.Second, 20*time.Millisecond, "the warm-up retries and the gateway becomes ready")
}

// connectedClients is each node's count of open client connections (INFO
// clients connected_clients), read over clients (one per node).
func connectedClients(t *testing.T, clients []*redis.Client) []int64 {
	t.Helper()
	out := make([]int64, len(clients))
	for i, c := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := c.Info(ctx, "clients").Result()
		cancel()
		require.NoError(t, err)
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
				_, err := fmt.Sscan(v, &out[i])
				require.NoError(t, err)
			}
		}
	}
	return out
}

// acceptedConns is each node's count of connections accepted so far, read
// over clients (one per node, each opening its connection before its first
// count).
func acceptedConns(t *testing.T, clients []*redis.Client) []int64 {
	t.Helper()
	out := make([]int64, len(clients))
	for i, c := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := c.Info(ctx, "stats").Result()
		cancel()
		require.NoError(t, err)
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_connections_received:"); ok {
				_, err := fmt.Sscan(v, &out[i])
				require.NoError(t, err)
			}
		}
	}
	return out
}

// waitReady polls /readyz until it answers 200.
func waitReady(t *testing.T, c *apitest.Client) {
	t.Helper()
	require.Eventually(t, func() bool { return c.Do(t, "GET", "/readyz", nil).Status == http.StatusOK },
		30*time.Second, 10*time.Millisecond, "/readyz never answered 200") // a loaded machine's warm-up
}
