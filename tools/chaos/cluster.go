package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/redistest"
)

// Backends the harness runs.
const (
	Redis   = "redis"   // one Redis
	Redlock = "redlock" // five independent masters
	// Sentinel is the redis backend in sentinel mode: a master, a replica
	// and three sentinels (sentinel.go).
	Sentinel = "sentinel"
)

// ClusterOptions says what to start.
type ClusterOptions struct {
	Backend string
	// Gateways is how many gateways to start (each with its own links).
	Gateways int
	// Bin is the lockgateway binary: gateways run as processes that can be
	// paused. Without it, InProcess starts each gateway and returns its URL.
	Bin       string
	InProcess func(t testing.TB, env map[string]string) string
	// ClockShim, when set, runs the nodes on the clock shim (Node.SetClock).
	ClockShim string
	// ServerBin is the nodes' server binary ("": redis-server; a
	// valkey-server works alike).
	ServerBin string
	// MaxTTL is LOCKGW_MAX_TTL, and so how long a restarted Redlock node
	// sits out and how long the state checker waits before calling a lock
	// key a leftover.
	MaxTTL time.Duration
	// Env adds or overrides LOCKGW_* settings of every gateway.
	Env map[string]string
}

// Cluster is Redis nodes, gateways reaching each node through a toxiproxy
// link of their own, one history and the state checker.
type Cluster struct {
	T        testing.TB
	Opts     ClusterOptions
	Nodes    []*Node
	Toxi     *Toxi
	Links    [][]*Link  // [gateway][node]
	Gateways []*Gateway // when started as processes
	URLs     []string   // the gateways' base URLs
	History  *History
	Client   *Client
	State    *State
	// Sentinels, with the Sentinel backend, are the set-up Nodes belong
	// to; the gateways find the master through them, not through Links.
	Sentinels *redistest.Sentinels

	stopSampling func()
}

// NewCluster starts the nodes and the gateways and waits until every
// gateway has reached every node once (so each knows each node's run_id).
func NewCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	if opts.Gateways == 0 {
		opts.Gateways = 2
	}
	c := &Cluster{T: t, Opts: opts, Toxi: NewToxi(), History: &History{}, Client: NewClient(), State: NewState(opts.MaxTTL)}
	t.Cleanup(c.Client.Close)
	n := 1
	if opts.Backend == Redlock {
		n = 5
	}
	if opts.Backend == Sentinel {
		c.startSentinel()
		n = 0
	}
	for range n {
		c.Nodes = append(c.Nodes, newNode(t, redistest.StartOptions(t, redistest.Options{Bin: opts.ServerBin, ClockShim: opts.ClockShim})))
	}
	for range opts.Gateways {
		c.AddGateway()
	}
	return c
}

// AddGateway starts one more gateway, with links of its own, and waits
// until it is ready. It returns the gateway's index.
func (c *Cluster) AddGateway() int {
	c.T.Helper()
	var links []*Link
	var urls, names []string
	for _, n := range c.Nodes {
		l := c.Toxi.Link(c.T, n.Addr())
		links = append(links, l)
		urls = append(urls, l.URL())
		names = append(names, n.Addr()+"/0") // every gateway, through links of its own, serves one node list
	}
	env := map[string]string{
		"LOCKGW_BACKEND":            c.Opts.Backend,
		"LOCKGW_MAX_TTL":            c.Opts.MaxTTL.String(),
		"LOCKGW_DEFAULT_TTL":        c.Opts.MaxTTL.String(),
		"LOCKGW_MAX_WAIT":           "5s",
		"LOCKGW_LOG_LEVEL":          "warn",
		"LOCKGW_SHUTDOWN_TIMEOUT":   "10s",
		"LOCKGW_BACKEND_TIMEOUT":    "1s",
		"LOCKGW_REDIS_URL":          urls[0],
		"LOCKGW_REDLOCK_URLS":       strings.Join(urls, ","),
		"LOCKGW_REDLOCK_NODE_NAMES": strings.Join(names, ","),
		"LOCKGW_RATE_LIMIT_WINDOW":  "0",
	}
	if c.Sentinels != nil {
		maps.Copy(env, sentinelEnv(c.Sentinels))
	}
	maps.Copy(env, c.Opts.Env)
	c.Links = append(c.Links, links)
	if c.Opts.Bin != "" {
		g := StartGateway(c.T, c.Opts.Bin, env)
		if err := g.Ready(10 * time.Second); err != nil {
			c.T.Fatalf("chaos: %v\n%s", err, g.Logs())
		}
		c.Gateways = append(c.Gateways, g)
		c.URLs = append(c.URLs, g.URL)
	} else {
		c.URLs = append(c.URLs, c.Opts.InProcess(c.T, env))
		if err := (&Gateway{URL: c.URLs[len(c.URLs)-1]}).Ready(10 * time.Second); err != nil {
			c.T.Fatalf("chaos: %v", err)
		}
	}
	return len(c.URLs) - 1
}

// Sample starts scanning every node's keys every interval until Stop.
func (c *Cluster) Sample(interval time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			for _, n := range c.Nodes {
				c.State.Sample(ctx, n.Addr(), n.Client())
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	c.stopSampling = func() { cancel(); wg.Wait() }
}

// Heal undoes every fault the harness can undo: nodes and gateways resume,
// toxics go. Killed nodes stay down.
func (c *Cluster) Heal() {
	for _, n := range c.Nodes {
		n.Resume()
	}
	for _, g := range c.Gateways {
		g.Resume()
	}
	for _, ls := range c.Links {
		for _, l := range ls {
			l.Clear()
			l.RemoveTaps()
		}
	}
}

// Finish stops sampling, waits until the maximum TTL has passed since
// quiet (the moment after which nothing could have written a lock key),
// and checks that no lock key is left.
func (c *Cluster) Finish(quiet time.Time) {
	if c.stopSampling != nil {
		c.stopSampling()
	}
	time.Sleep(time.Until(quiet.Add(c.Opts.MaxTTL + 100*time.Millisecond)))
	for _, n := range c.Nodes {
		c.State.Sample(context.Background(), n.Addr(), n.Client())
		c.State.Drained(context.Background(), n.Addr(), n.Client())
	}
}

// Verdict is what the checkers found in one run.
type Verdict struct {
	Ops          []Op
	Violations   []Violation
	Inconclusive []string // keys whose linearizability check timed out
}

// Check runs every checker over the history, the registers and what the
// state checker found. dir and name, when set, say where to draw the
// histories that are not linearizable.
func (c *Cluster) Check(registers map[string]*Register, dir, name string) Verdict {
	v := Verdict{Ops: c.History.Ops()}
	v.Violations = append(v.Violations, CheckOverlap(v.Ops)...)
	lin, inc := CheckLinearizable(v.Ops, time.Minute, dir, name)
	v.Violations = append(v.Violations, lin...)
	v.Inconclusive = inc
	v.Violations = append(v.Violations, CheckFences(v.Ops)...)
	for _, k := range slices.Sorted(maps.Keys(registers)) {
		v.Violations = append(v.Violations, CheckCounter(k, registers[k])...)
	}
	v.Violations = append(v.Violations, c.State.Violations()...)
	return v
}

// ByChecker counts violations by checker.
func (v Verdict) ByChecker() map[string]int {
	m := map[string]int{}
	for _, x := range v.Violations {
		m[x.Checker]++
	}
	return m
}

// Summary is one line on the run: operations by kind and result.
func (v Verdict) Summary() string {
	type kr struct {
		k Kind
		r Result
	}
	counts := map[kr]int{}
	for _, op := range v.Ops {
		counts[kr{op.Kind, op.Result}]++
	}
	var parts []string
	for _, k := range []Kind{Acquire, Extend, Release} {
		var rs []string
		for r := Unknown; r <= Rejected; r++ {
			if n := counts[kr{k, r}]; n > 0 {
				rs = append(rs, fmt.Sprintf("%s %d", r, n))
			}
		}
		if len(rs) > 0 {
			parts = append(parts, k.String()+": "+strings.Join(rs, ", "))
		}
	}
	return fmt.Sprintf("%d operations (%s)", len(v.Ops), strings.Join(parts, "; "))
}
