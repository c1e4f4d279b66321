//go:build chaos

package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/tools/chaos"
)

// The row nodeset-transition: a change of the Redlock node list from
// {a,b,c} to {a,b,d} while clients run, done as docs/operations.md says
// (rule T of docs/safety.md).

// Gateways of the row, by number: 0 and 1 list {a,b,c} (old), 2 and 3
// {a,b,d} with the previous list {a,b,c} (transition), 4 {a,b,d} alone
// (new).
var (
	oldGateways        = []int{0, 1}
	transitionGateways = []int{2, 3}
	newGateway         = 4
)

// transitionKeys are the keys the row's lock clients contend for;
// transitionSem is its semaphore, limit transitionLimit.
var transitionKeys = []string{"k", "j"}

const (
	transitionSem   = "sem"
	transitionLimit = 3
	// transitionMaxTTL is the row's LOCKGW_MAX_TTL, and so how long after
	// begin the transition finishes: time for the transition gateways to
	// start, the old ones to stop and the new one to start before it, on a
	// loaded 2-core machine. 1.5 s was not always enough, nor 3 s: the
	// transition gateways, whose warm-up opens most of a pool on each of
	// four nodes through the row's proxies, were ready 1.8 to 3.6 s after
	// they began (3 of 4 runs staged too late on one day), and the steps
	// after it take about 0.8 s.
	transitionMaxTTL = 5 * time.Second
)

// oldList is the nodeset-transition cluster: nodes a, b, c, d (0-3), and
// the two old gateways, which mark a, b and c with their list. The row
// starts the others.
func oldList(t *testing.T, opts chaos.ClusterOptions) *chaos.Cluster {
	c := nodesOnly(t, opts, 4)
	for range oldGateways {
		addGateway(c, gatewaySpec{nodes: []int{0, 1, 2}, ready: true})
	}
	return c
}

// markerPoll is one read of every node's node list marker, made between
// start and end (ns); ok is false for a node that did not answer.
type markerPoll struct {
	start, end int64
	have       []string
	ok         []bool
}

// markerWatch reads every node's marker straight from the node (not
// through a gateway's link) about every 10 ms.
type markerWatch struct {
	mu    sync.Mutex
	polls []markerPoll
	stop  func()
}

func watchMarkers(c *chaos.Cluster) *markerWatch {
	w := &markerWatch{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			p := markerPoll{start: time.Now().UnixNano(), have: make([]string, len(c.Nodes)), ok: make([]bool, len(c.Nodes))}
			for i, n := range c.Nodes {
				rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
				v, err := n.Client().Get(rctx, "lockgw:redlock:set").Result()
				rcancel()
				if errors.Is(err, redis.Nil) {
					v, err = "", nil
				}
				p.have[i], p.ok[i] = v, err == nil
			}
			p.end = time.Now().UnixNano()
			w.mu.Lock()
			w.polls = append(w.polls, p)
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	w.stop = func() { cancel(); wg.Wait() }
	return w
}

func (w *markerWatch) all() []markerPoll {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.polls)
}

// until waits up to timeout for a poll that satisfies cond, and returns it.
func (w *markerWatch) until(timeout time.Duration, cond func(markerPoll) bool) (markerPoll, bool) {
	deadline := time.Now().Add(timeout)
	seen := 0
	for {
		polls := w.all()
		for _, p := range polls[seen:] {
			if cond(p) {
				return p, true
			}
		}
		seen = len(polls)
		if time.Now().After(deadline) {
			return markerPoll{}, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// transitionPhase is clients working through some of the row's gateways
// until stopped: lock clients on transitionKeys and permit clients on
// transitionSem, recorded under the gateways' own numbers.
type transitionPhase struct {
	locks *chaos.Workload
	sems  *chaos.SemWorkload
	stop  func()
}

func startPhase(r *run, sems *chaos.History, gws []int, lockClients, semClients int, seed uint64) *transitionPhase {
	var urls []string
	for _, g := range gws {
		urls = append(urls, r.URLs[g])
	}
	p := &transitionPhase{
		locks: &chaos.Workload{
			Gateways: urls, Indexes: gws, Keys: transitionKeys, Clients: lockClients, TTL: ttl,
			Hold: 30 * time.Millisecond, Wait: 300 * time.Millisecond, Extend: 0.3, Pause: 0.05, Retry: 0.5,
			Registers: r.w.Registers, History: r.History, Client: r.Client, Seed: seed,
		},
		sems: &chaos.SemWorkload{
			Gateways: urls, Indexes: gws, Key: transitionSem, Limit: func(int) int { return transitionLimit }, Clients: semClients,
			TTL: ttl, Hold: 30 * time.Millisecond, Wait: 300 * time.Millisecond, Extend: 0.3,
			History: sems, Client: r.Client, Seed: seed,
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	waits := []func(){p.locks.Start(ctx), p.sems.Start(ctx)}
	var once sync.Once
	p.stop = func() {
		once.Do(func() {
			cancel()
			for _, w := range waits {
				w()
			}
		})
	}
	return p
}

// transitionMoments are what the marker polls say about the transition,
// each a bound that is sound whatever the polls' timing (a marker only
// moves forward, O → O>N → N, but for a node that loses its data, and the
// row restarts no node of a list while gateways of that list alone could
// count it before it is marked again).
type transitionMoments struct {
	// notBegun: the start of the last poll in which every node of O
	// answered and none carried O>N or N: begin (on the first node) came
	// after it.
	notBegun int64
	// begun: the end of the first poll in which a majority of O carried
	// O>N or N: from then on, no old gateway can count a majority of O.
	begun int64
	// unfinished: the start of the last poll, before the first that saw
	// N on two nodes of N, in which every node of N answered and at most
	// one carried N: a grant by a gateway with N alone needs two nodes
	// carrying N at its votes, so none answered before this moment.
	unfinished int64
	// noneNew: the start of the last poll in which every node of N
	// answered and none carried N: the finish (the first N written) came
	// after it.
	noneNew int64
	// finished: the end of the first poll that saw N on every node of N.
	finished int64
}

func momentsOf(polls []markerPoll, o, n []int, transition, newList string) (m transitionMoments) {
	moved := func(s string) bool { return s == transition || s == newList }
	isNew := func(s string) bool { return s == newList }
	anyNew, majorityNew := false, false
	for _, p := range polls {
		answered := func(nodes []int) bool {
			for _, i := range nodes {
				if !p.ok[i] {
					return false
				}
			}
			return true
		}
		count := func(nodes []int, f func(string) bool) int {
			k := 0
			for _, i := range nodes {
				if p.ok[i] && f(p.have[i]) {
					k++
				}
			}
			return k
		}
		if m.begun == 0 && answered(o) && count(o, moved) == 0 {
			m.notBegun = p.start
		}
		if m.begun == 0 && count(o, moved) > len(o)/2 {
			m.begun = p.end
		}
		anyNew = anyNew || count(n, isNew) > 0
		majorityNew = majorityNew || count(n, isNew) > len(n)/2
		if !anyNew && answered(n) {
			m.noneNew = p.start
		}
		if !majorityNew && answered(n) {
			m.unfinished = p.start
		}
		if m.finished == 0 && count(n, isNew) == len(n) {
			m.finished = p.end
		}
	}
	return m
}

// nodesetTransition changes the node list from {a,b,c} to {a,b,d} as
// docs/operations.md says, while clients use whichever gateways run, and
// checks rule T's promises besides the run's checkers (the transition
// checker, reported as "transition").
func nodesetTransition(t *testing.T, r *run) {
	names := make([]string, len(r.Nodes))
	for i, n := range r.Nodes {
		names[i] = n.Addr() + "/0"
	}
	list := func(nodes ...int) string {
		var s []string
		for _, i := range nodes {
			s = append(s, names[i])
		}
		return strings.Join(slices.Sorted(slices.Values(s)), ",")
	}
	o, n := []int{0, 1, 2}, []int{0, 1, 3}
	oldL, newL := list(o...), list(n...)
	transition := oldL + ">" + newL
	since := func(ns int64) time.Duration { return time.Duration(ns - r.start.UnixNano()).Round(time.Millisecond) }

	watch := watchMarkers(r.Cluster)
	defer watch.stop()
	sems := &chaos.History{}
	seed := r.w.Seed
	old := startPhase(r, sems, oldGateways, clients, 4, seed+1)
	defer old.stop()

	// Step 1 of docs/operations.md: d is up (empty); transition gateways
	// start beside the old ones, and begin.
	r.at(time.Second)
	for range transitionGateways {
		addGateway(r.Cluster, gatewaySpec{nodes: n, prev: o, ready: true})
	}
	ready := time.Now()
	require.NoError(t, r.Links[3][1].Latency(25, 15)) // transition gateway 3 to b
	trans := startPhase(r, sems, transitionGateways, clients, 4, seed+2)
	defer trans.stop()

	// Step 2: the old gateways stop once a transition gateway is ready.
	// They are asked on for 300 ms first: every node of O refuses them.
	time.Sleep(300 * time.Millisecond)
	old.stop()
	// A connection the clients' transport dialed and never used (a
	// request took an idle one first) holds up a gateway's graceful
	// shutdown 5 s (net/http counts a new connection idle only after 5 s):
	// close them first, as a client gone for good would.
	r.Client.Close()
	stopping := time.Now()
	for _, g := range oldGateways {
		require.NoError(t, r.Gateways[g].Stop())
	}
	stopped := time.Now()

	// c, a node of O alone, restarts empty: the transition gateways
	// begin it again (O>N, a settle key, rule Q's quarantine).
	r.Nodes[2].Restart()
	restartedC := time.Now()

	// A gateway with the new list alone: refused until the finish.
	addGateway(r.Cluster, gatewaySpec{nodes: n})
	require.NoError(t, r.Links[newGateway][3].Latency(25, 15)) // new gateway to d
	newer := startPhase(r, sems, []int{newGateway}, clients/2, 2, seed+3)
	defer newer.stop()
	started := time.Now()

	// b stops (SIGSTOP) for 1.2 s from 300 ms before the earliest finish:
	// the finish may find it silent, and write N on a and d alone.
	began, ok := watch.until(5*time.Second, func(p markerPoll) bool {
		k := 0
		for _, i := range o {
			if p.ok[i] && p.have[i] == transition {
				k++
			}
		}
		return k > len(o)/2
	})
	require.True(t, ok, "the transition did not begin")
	time.Sleep(time.Until(time.Unix(0, began.end).Add(r.Opts.MaxTTL - 300*time.Millisecond)))
	r.Nodes[1].Pause()
	paused := time.Now()
	time.Sleep(1200 * time.Millisecond)
	r.Nodes[1].Resume()
	resumed := time.Now()

	// The finish: N on a, b and d, LOCKGW_MAX_TTL plus drift after begin.
	fin, ok := watch.until(10*time.Second, func(p markerPoll) bool {
		return p.ok[0] && p.ok[1] && p.ok[3] && p.have[0] == newL && p.have[1] == newL && p.have[3] == newL
	})
	require.True(t, ok, "the transition did not finish within 10 s")

	// Once finished, a, in both lists, restarts empty: the gateways join
	// it with N, quarantined; the new gateway counts b and d meanwhile.
	time.Sleep(time.Second)
	r.Nodes[0].Restart()
	restartedA := time.Now()
	time.Sleep(r.Opts.MaxTTL + time.Second) // a counts again
	newer.stop()
	trans.stop()
	last, settled := watch.until(5*time.Second, func(p markerPoll) bool {
		return p.ok[0] && p.ok[1] && p.ok[2] && p.ok[3] && p.have[0] == newL && p.have[1] == newL && p.have[3] == newL
	})
	watch.stop()
	polls := watch.all()
	var before []markerPoll // until a restarts: the bounds need markers that only move forward
	for _, p := range polls {
		if p.end < restartedA.UnixNano() {
			before = append(before, p)
		}
	}
	m := momentsOf(before, o, n, transition, newL)

	// The end state: a, b and d serve N, c keeps the transition.
	assert.True(t, settled, "a, b and d serve the new list at the end")
	assert.Equal(t, transition, last.have[2], "c, of the old list alone, keeps the transition marker")
	assert.Less(t, restartedC.UnixNano(), fin.start, "c restarted before the finish (the row's timing)")
	assert.Less(t, started.UnixNano(), fin.start, "the new gateway started before the finish (the row's timing)")
	require.NotZero(t, m.begun, "no poll saw the transition begin")
	require.NotZero(t, m.notBegun, "no poll saw the nodes before the transition began")
	require.NotZero(t, m.noneNew, "no poll saw the nodes before the transition finished")
	// finish − begin ≤ m.finished − m.notBegun: the transition finished
	// no sooner than the longest lease after it began (it may not).
	assert.GreaterOrEqual(t, time.Duration(m.finished-m.notBegun), r.Opts.MaxTTL,
		"the transition finished sooner than LOCKGW_MAX_TTL after it began")

	r.notes = append(r.notes,
		fmt.Sprintf("transition gateways ready %v in; old gateways stopped %v in (SIGTERM took %v); c restarted %v in; new gateway started %v in; b stopped from %v to %v in; a restarted %v in",
			since(ready.UnixNano()), since(stopped.UnixNano()), stopped.Sub(stopping).Round(time.Millisecond), since(restartedC.UnixNano()), since(started.UnixNano()),
			since(paused.UnixNano()), since(resumed.UnixNano()), since(restartedA.UnixNano())),
		fmt.Sprintf("markers: began by %v (not before %v), a majority of N carried N from %v (not before %v), all of N by %v: finished %v to %v after begin",
			since(m.begun), since(m.notBegun), since(m.unfinished), since(m.noneNew), since(m.finished),
			time.Duration(m.noneNew-m.begun).Round(time.Millisecond), time.Duration(m.finished-m.notBegun).Round(time.Millisecond)),
		fmt.Sprintf("markers at the end: a %q, b %q, c %q, d %q", last.have[0], last.have[1], last.have[2], last.have[3]))

	rejected := int64(0)
	for _, p := range []*transitionPhase{old, trans, newer} {
		rejected += p.locks.Rejected()
	}
	assert.Zero(t, rejected, "answers outside the API's lock statuses")

	// Permits: never more than the limit, no fence twice, through all
	// three kinds of gateway.
	semOps := sems.Ops()
	v, most := chaos.CheckPermits(semOps, transitionLimit)
	r.permits = v
	for i, x := range v {
		if i < 5 {
			t.Logf("violation: %v", x)
		}
	}
	assert.Empty(t, v, "more permit holders than the limit")
	r.extraOps = len(semOps)
	r.notes = append(r.notes, fmt.Sprintf("semaphore: %d requests, %d permits granted (%s), at most %d holders at once",
		len(semOps), chaos.Count(semOps, chaos.Acquire, chaos.Granted), byGateway(semOps, holds), most))

	// The transition checker, on the whole history (locks and permits).
	r.late = func(ops []chaos.Op) []chaos.Violation {
		all := slices.Concat(ops, semOps)
		found := transitionViolations(all, m)
		for i, x := range found {
			if i < 5 {
				t.Logf("violation: %v", x)
			}
		}
		assert.Empty(t, found, "rule T's promises")
		isOld := func(op chaos.Op) bool { return slices.Contains(oldGateways, op.Gateway) }
		afterBegin, oldHolds, newHolds, newBefore := 0, 0, 0, 0
		for _, op := range all {
			switch {
			case isOld(op) && op.Call >= m.begun:
				afterBegin++
			case op.Gateway == newGateway && op.Call < m.unfinished:
				newBefore++
			}
			if isOld(op) && holds(op) {
				oldHolds++
			}
			if op.Gateway == newGateway && holds(op) {
				newHolds++
			}
		}
		assert.Positive(t, afterBegin, "the old gateways were asked after the transition began")
		assert.Positive(t, newBefore, "the new gateway was asked before the transition finished")
		assert.Positive(t, oldHolds, "the old gateways granted before the transition began")
		assert.Positive(t, newHolds, "the new gateway granted once the transition finished")
		// Logged here: the run's notes were logged before this.
		t.Logf("requests by gateway and status: %s", statusesByGateway(all))
		t.Logf("old gateways: %d requests after begin (%s); new gateway: %d requests before the finish (%s), %d grants in all, the first %v after a majority of N carried N",
			afterBegin, statuses(all, func(op chaos.Op) bool { return isOld(op) && op.Call >= m.begun }),
			newBefore, statuses(all, func(op chaos.Op) bool { return op.Gateway == newGateway && op.Call < m.unfinished }),
			newHolds, firstHold(all, newGateway, m.unfinished))
		return found
	}
}

// transitionViolations checks rule T's promises on the history, by the
// marker polls' bounds: no old gateway grants, renews or extends anything
// asked after a majority of O was marked O>N; the new gateway grants
// nothing answered before a majority of N carried N; and no lease or
// permit an old gateway answered for is still valid when the first node
// is given N (the simulator's check transition-settled).
func transitionViolations(ops []chaos.Op, m transitionMoments) []chaos.Violation {
	var found []chaos.Violation
	add := func(op chaos.Op, what string) {
		found = append(found, chaos.Violation{Checker: "transition", Key: op.Key, Detail: fmt.Sprintf("%s: %v", what, op)})
	}
	for _, op := range ops {
		answered := holds(op) || op.Result == chaos.Extended
		switch {
		case !answered:
		case slices.Contains(oldGateways, op.Gateway) && op.Call >= m.begun:
			add(op, fmt.Sprintf("an old gateway answered for a lease asked for after a majority of O carried the transition (%s)", time.Unix(0, m.begun).Format("15:04:05.000")))
		case slices.Contains(oldGateways, op.Gateway) && op.Expires >= m.noneNew:
			add(op, fmt.Sprintf("an old gateway's lease valid when a node may have carried N (%s)", time.Unix(0, m.noneNew).Format("15:04:05.000")))
		case op.Gateway == newGateway && op.Return < m.unfinished:
			add(op, fmt.Sprintf("the new gateway granted before a majority of N carried N (%s)", time.Unix(0, m.unfinished).Format("15:04:05.000")))
		}
	}
	return found
}

// statuses counts the operations keep picks, by HTTP status.
func statuses(ops []chaos.Op, keep func(chaos.Op) bool) string {
	counts := map[int]int{}
	for _, op := range ops {
		if keep(op) {
			counts[op.Status]++
		}
	}
	var parts []string
	for _, s := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%d: %d", s, counts[s]))
	}
	return strings.Join(parts, ", ")
}

func statusesByGateway(ops []chaos.Op) string {
	var parts []string
	for g := range newGateway + 1 {
		parts = append(parts, fmt.Sprintf("gateway %d {%s}", g, statuses(ops, func(op chaos.Op) bool { return op.Gateway == g })))
	}
	return strings.Join(parts, "; ")
}

func byGateway(ops []chaos.Op, keep func(chaos.Op) bool) string {
	counts := map[int]int{}
	for _, op := range ops {
		if keep(op) {
			counts[op.Gateway]++
		}
	}
	var parts []string
	for _, g := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("gateway %d: %d", g, counts[g]))
	}
	return strings.Join(parts, ", ")
}

// firstHold is how long after from the first grant through gw was answered.
func firstHold(ops []chaos.Op, gw int, from int64) time.Duration {
	first := int64(0)
	for _, op := range ops {
		if op.Gateway == gw && holds(op) && (first == 0 || op.Return < first) {
			first = op.Return
		}
	}
	return time.Duration(first - from).Round(time.Millisecond)
}

// The transition checker finds each broken promise, on a made-up history:
// markers O, then the transition on a and b (begin), then N on a, b and d.
func TestTransitionCheckerCatches(t *testing.T) {
	const (
		oldL, newL = "a,b,c", "a,b,d"
		transition = oldL + ">" + newL
	)
	poll := func(at int64, have ...string) markerPoll {
		return markerPoll{start: at, end: at + 5, have: have, ok: []bool{true, true, true, true}}
	}
	polls := []markerPoll{
		poll(0, oldL, oldL, oldL, ""),
		poll(100, transition, oldL, oldL, ""),
		poll(200, transition, transition, oldL, transition),
		poll(2000, transition, transition, transition, transition),
		poll(3000, newL, transition, transition, transition),
		poll(3100, newL, newL, transition, newL),
	}
	m := momentsOf(polls, []int{0, 1, 2}, []int{0, 1, 3}, transition, newL)
	assert.Equal(t, transitionMoments{notBegun: 0, begun: 205, unfinished: 3000, noneNew: 2000, finished: 3105}, m)
	op := func(gw int, call, ret, expires int64, result chaos.Result) chaos.Op {
		return chaos.Op{Gateway: gw, Key: "k", Kind: chaos.Acquire, Call: call, Return: ret, Expires: expires, Result: result, Status: 201}
	}
	fine := []chaos.Op{
		op(0, 150, 160, 500, chaos.Granted),             // asked before a majority of O moved
		op(1, 300, 310, 0, chaos.Unknown),               // refused
		op(newGateway, 2500, 2510, 0, chaos.Unknown),    // refused
		op(newGateway, 2990, 3110, 4000, chaos.Granted), // may have voted after 3000
		op(2, 150, 160, 4000, chaos.Granted),            // a transition gateway
	}
	assert.Empty(t, transitionViolations(fine, m))
	broken := []chaos.Op{
		op(1, 205, 300, 700, chaos.Granted),             // an old gateway after begin
		op(0, 150, 160, 2001, chaos.Granted),            // an old lease valid at the first N
		op(newGateway, 2500, 2999, 4000, chaos.Renewed), // a new-list grant before a majority carried N
	}
	found := transitionViolations(broken, m)
	assert.Len(t, found, 3)
	for _, v := range found {
		assert.Equal(t, "transition", v.Checker)
	}
}
