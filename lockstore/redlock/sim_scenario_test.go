//go:build !race

package redlock

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockgateway/lockgateway/internal/luaredis"
	"github.com/lockgateway/lockgateway/lockstore/internal/sim"
	"github.com/redis/go-redis/v9"
)

// A staged run of the Redlock model: the random sweep's world (real
// *Store, real scripts, the same checkers), with no random faults and
// requests sent one at a time as a scenario says, each waited for. Where a
// staging is too rare for the sweep to reach within its budget, this still
// lets the simulator judge it, and its control shows the check would fail.

// rlStaged is a quiet world: nodes whose clocks agree, gateways that
// reach every node but through the links a scenario cuts.
type rlStaged struct {
	w *rlWorld
}

func newStaged(control string, nodes, gateways int) *rlStaged {
	ctl := rlControls[control]
	net := rlNet{Net: sim.Net{Timeout: 20_000, DelayMin: 50, DelayMax: 1_500}}
	w := newRLWorld(1, net, ctl, sim.NewHistory())
	w.hist.OwnFences = true
	for i := range nodes {
		w.nodes = append(w.nodes, &rlNode{id: i, addr: nodeAddr(i), srv: luaredis.New(), runID: fmt.Sprintf("%040x", i+1), loaded: map[string]bool{}})
	}
	list := make([]int, nodes)
	for i := range list {
		list[i] = i
	}
	for i := range gateways {
		g := &rlGateway{id: i, list: list}
		w.gws = append(w.gws, g)
		w.newStore(g, ctl, nil)
	}
	w.loop(func() bool { return w.takeReady() && allStarted(w.gws) })
	return &rlStaged{w: w}
}

// cut cuts the link between gateway gw and node n for d.
func (s *rlStaged) cut(gw, n int, d time.Duration) {
	s.w.cutUntil[[2]int{gw, n}] = s.w.now() + d.Microseconds()
	s.w.hist.Note(s.w.now(), "", "link gateway %d - node %d cut for %v", gw, n, d)
}

// send sends one request through gateway gw and runs the world until it is
// answered.
func (s *rlStaged) send(gw int, r sim.Request) *sim.Request {
	w := s.w
	req := &r
	req.Gw = gw
	w.hist.Sent(w.now(), req, 1)
	answered := false
	w.start(&rlOp{req: req, gw: w.gws[gw], call: sim.CallFor(w.gws[gw].store, req, 1), done: func(op *rlOp) {
		op.record()
		w.hist.Answered(w.now(), req)
		answered = true
	}})
	w.loop(func() bool { return answered })
	return req
}

// wait runs the world for d.
func (s *rlStaged) wait(d time.Duration) { s.w.runFor(d.Microseconds()) }

// finish closes the stores and runs the checkers.
func (s *rlStaged) finish() *sim.History {
	s.w.closeAll()
	s.w.hist.Check()
	return s.w.hist
}

// copiesWithT checks which nodes hold a copy of the lock's lease of k0
// with its end T (the "\x01<T>:" field), as the staging needs.
func (s *rlStaged) copiesWithT(step string, want ...bool) error {
	for i, wantT := range want {
		v, ok := s.w.nodes[i].srv.Peek("lockgw:{k0}:lock")
		if !ok || strings.Contains(v.Str, "\x01") != wantT {
			return fmt.Errorf("%s: node %d holds %q (found %v), want a copy of a lease of the token with T %v", step, i, v.Str, ok, wantT)
		}
	}
	return nil
}

// stageRenewalCopyWithoutT is TestReviewRedlockRenewalDropsHoldAtLeast's
// staging in the simulator, 3 nodes, q = 2:
//
//  1. d is granted (TTL 200 ms, hold-at-least 600 ms) through gateway 1,
//     cut from node 2: the lease, with its end T, is on nodes 0 and 1.
//  2. d renews (no hold-at-least) through gateway 0: nodes 0 and 1 renew,
//     node 2 gets a value of its own, without T.
//  3. d releases through gateway 2, cut from node 1: node 0 lingers until
//     T, node 2 must linger too (release.lua's ARGV[8]).
//  4. Once node 1's copy ran out, another token asks through gateway 0,
//     before T: it must be refused.
func stageRenewalCopyWithoutT(control string) (newcomer *sim.Request, h *sim.History, err error) {
	s := newStaged(control, 3, 3)
	s.w.hist.Key("k0", false, 1)
	d := sim.Request{Client: 0, Kind: "acquire", Key: "k0", Token: "c0.t1"}
	s.cut(1, 2, time.Second)
	g := d
	g.TTL, g.AtLeast = 200*time.Millisecond, 600*time.Millisecond
	if r := s.send(1, g); r.Answer != "201" {
		return nil, s.finish(), fmt.Errorf("step 1: the grant was answered %s, want 201", r.Answer)
	}
	renew := d
	renew.TTL = 200 * time.Millisecond
	if r := s.send(0, renew); r.Answer != "200" {
		return nil, s.finish(), fmt.Errorf("step 2: the renewal was answered %s, want 200", r.Answer)
	}
	if err := s.copiesWithT("step 2", true, true, false); err != nil {
		return nil, s.finish(), err
	}
	s.cut(2, 1, time.Second)
	rel := d
	rel.Kind = "release"
	if r := s.send(2, rel); r.Answer != "204" {
		return nil, s.finish(), fmt.Errorf("step 3: the release was answered %s, want 204", r.Answer)
	}
	s.wait(250 * time.Millisecond)
	newcomer = s.send(0, sim.Request{Client: 1, Kind: "acquire", Key: "k0", Token: "c1.t1", TTL: 100 * time.Millisecond})
	return newcomer, s.finish(), nil
}

// stageEarlierLeaseCopy is the second hole the review of G2' found
// (docs/performance-history.md, twelfth round), on today's release, 3
// nodes, q = 2:
//
//  1. d is granted a lease of 1 s through gateway 0 (every node) and
//     releases it through gateway 1, cut from node 2: node 2 keeps that
//     lease's copy, confirmed, without T.
//  2. d is granted again (TTL 200 ms, hold-at-least 600 ms) through gateway
//     1, still cut from node 2: the new lease, with T, is on nodes 0 and 1.
//  3. d releases through gateway 2, cut from node 1: node 0 lingers until
//     T, node 2 (the earlier lease's copy) must linger too.
//  4. Once node 1's copy ran out, another token asks through gateway 0,
//     before T: it must be refused.
func stageEarlierLeaseCopy(control string) (newcomer *sim.Request, h *sim.History, err error) {
	s := newStaged(control, 3, 3)
	s.w.hist.Key("k0", false, 1)
	d := sim.Request{Client: 0, Kind: "acquire", Key: "k0", Token: "c0.t1"}
	first := d
	first.TTL = time.Second
	if r := s.send(0, first); r.Answer != "201" {
		return nil, s.finish(), fmt.Errorf("step 1: the first grant was answered %s, want 201", r.Answer)
	}
	s.cut(1, 2, 2*time.Second)
	rel := d
	rel.Kind = "release"
	if r := s.send(1, rel); r.Answer != "204" {
		return nil, s.finish(), fmt.Errorf("step 1: the first release was answered %s, want 204", r.Answer)
	}
	g := d
	g.TTL, g.AtLeast = 200*time.Millisecond, 600*time.Millisecond
	if r := s.send(1, g); r.Answer != "201" {
		return nil, s.finish(), fmt.Errorf("step 2: the grant was answered %s, want 201", r.Answer)
	}
	if err := s.copiesWithT("step 2", true, true, false); err != nil {
		return nil, s.finish(), err
	}
	s.cut(2, 1, time.Second)
	if r := s.send(2, rel); r.Answer != "204" {
		return nil, s.finish(), fmt.Errorf("step 3: the release was answered %s, want 204", r.Answer)
	}
	s.wait(250 * time.Millisecond)
	newcomer = s.send(0, sim.Request{Client: 1, Kind: "acquire", Key: "k0", Token: "c1.t1", TTL: 100 * time.Millisecond})
	return newcomer, s.finish(), nil
}

// TestSimRedlockRenewalCopyWithoutT runs both stagings of a copy without T
// with the real scripts (the newcomer is refused, no check fails) and with
// control linger-unread, which the random sweep does not reach: the
// at-least check must fail.
func TestSimRedlockRenewalCopyWithoutT(t *testing.T) {
	redis.SetLogger(rlQuiet{})
	for _, tc := range []struct {
		staging string
		stage   func(control string) (*sim.Request, *sim.History, error)
		control string
		answer  string
		check   string
	}{
		{"renewal", stageRenewalCopyWithoutT, "", "409 held", ""},
		{"renewal", stageRenewalCopyWithoutT, "linger-unread", "201", "at-least"},
		{"earlier-lease", stageEarlierLeaseCopy, "", "409 held", ""},
		{"earlier-lease", stageEarlierLeaseCopy, "linger-unread", "201", "at-least"},
	} {
		t.Run(fmt.Sprintf("%s/control=%q", tc.staging, tc.control), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				newcomer, h, err := tc.stage(tc.control)
				if err != nil {
					t.Fatalf("the staging did not go as planned: %v", err)
				}
				if newcomer.Answer != tc.answer {
					t.Fatalf("the newcomer before T was answered %s, want %s", newcomer.Answer, tc.answer)
				}
				got := ""
				if v := h.First(); v != nil {
					got = v.Check
				}
				if got != tc.check {
					t.Fatalf("the first failed check is %q, want %q: %v", got, tc.check, h.First())
				}
			})
		})
	}
}
