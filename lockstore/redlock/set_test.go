package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/redlock"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const setKey = "lockgw:redlock:set"

// name is a node as node lists name it.
func name(s *redistest.Server) string { return s.Addr() + "/0" }

func marker(t testing.TB, s *redistest.Server) string {
	t.Helper()
	v, err := s.Client().Get(context.Background(), setKey).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	require.NoError(t, err)
	return v
}

// TestRedlockNodeListChange is the rolling deploy of issue 26, hole 4: an
// old gateway over {a,b,c} holds a key on {b,c} (a was down when it was
// granted, and came back empty); a new gateway over {a,b,d} starts. Before
// nodes remembered their list, the new one granted the key on {a,d}, a
// majority of its list that shares no node with the old lease's. Now it
// refuses every lock, naming the difference, while the old one keeps its
// lease and can extend and release it.
func TestRedlockNodeListChange(t *testing.T) {
	t.Parallel()
	ctx := backendtest.Ctx(t)
	srvs := backendtest.StartNodes(t, 4)
	a, b, c, d := srvs[0], srvs[1], srvs[2], srvs[3]
	old := backendtest.OpenRedlock(t, []string{a.URL(), b.URL(), c.URL()}, redlock.Options{NodeTimeout: backendtest.Roomy})
	require.NoError(t, old.Ping(ctx))
	oldList := strings.Join(sortedNames(a, b, c), ",")
	for _, s := range []*redistest.Server{a, b, c} {
		assert.Equal(t, oldList, marker(t, s), "a fresh deployment marks every node with its list")
	}
	assert.Empty(t, marker(t, d))

	a.Kill()
	lease, err := old.Acquire(ctx, "deploy", lockstore.AcquireRequest{Token: "old-holder", TTL: 30 * time.Second})
	require.NoError(t, err, "b and c are a majority of the old list")
	a.Start() // empty: no persistence

	newer := backendtest.OpenRedlock(t, []string{a.URL(), b.URL(), d.URL()}, redlock.Options{NodeTimeout: backendtest.Roomy})
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		_, err := newer.Acquire(ctx, "deploy", lockstore.AcquireRequest{Token: "new-holder", TTL: 10 * time.Second})
		require.Error(t, err, "attempt %d: the key is the old gateway's: granting it again is two holders", i)
		require.ErrorIs(t, err, lockstore.ErrUnavailable)
		require.ErrorIs(t, err, lockstore.ErrRefused)
		if i%5 == 0 {
			_, err := old.Extend(ctx, "deploy", "old-holder", 30*time.Second)
			require.NoError(t, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// What follows has a deadline of its own: under make test's load the
	// set-up and the loop above used up the first one (10 s), and the
	// Ping answered its context's end instead of the quorum's.
	ctx = backendtest.Ctx(t)
	err = newer.Ping(ctx)
	require.Error(t, err, "the new list must not be ready")
	var q *lockstore.QuorumError
	require.ErrorAs(t, err, &q)
	detail := q.QuorumDetail()
	t.Log(detail)
	assert.Contains(t, detail, "was last used with the node list ["+strings.ReplaceAll(oldList, ",", " ")+"]")
	assert.Contains(t, detail, "not in this gateway's list: ["+name(c)+"]")
	assert.Contains(t, detail, "only in this gateway's list: ["+name(d)+"]")
	assert.Contains(t, detail, "docs/operations.md")

	for _, s := range []*redistest.Server{b, d} {
		assert.NotEqual(t, strings.Join(sortedNames(a, b, d), ","), marker(t, s), "the refused gateway marks nothing")
	}
	assert.Empty(t, marker(t, d))

	_, err = newer.SemAcquire(ctx, "deploy-sem", lockstore.PermitRequest{Token: "new-holder", TTL: 10 * time.Second, Limit: 2})
	require.ErrorIs(t, err, lockstore.ErrRefused, "semaphores are refused as locks are")

	// Its reads and releases too: over its own list it sees the old
	// holder's lease on b only, and would answer "not held" (404) for a
	// lease held on b and c (the chaos row nodeset-change found it).
	err = newer.Release(ctx, "deploy", lease.Token)
	require.ErrorIs(t, err, lockstore.ErrRefused, "a release through the refused gateway")
	_, err = newer.Inspect(ctx, "deploy")
	require.ErrorIs(t, err, lockstore.ErrRefused, "a read through the refused gateway")
	require.ErrorIs(t, newer.SemRelease(ctx, "deploy-sem", "new-holder"), lockstore.ErrRefused)
	_, err = newer.SemInspect(ctx, "deploy-sem")
	require.ErrorIs(t, err, lockstore.ErrRefused)
	require.NoError(t, old.Release(ctx, "deploy", lease.Token))
}

// TestRedlockNodeListMarksEmptyNodes: a node that lost its marker (a restart
// without persistence; here a DEL) is marked again by the first request
// that finds it so, once a node of the list was seen to serve it, and
// counts at once; a fresh deployment waits for every node before it marks
// any.
func TestRedlockNodeListMarksEmptyNodes(t *testing.T) {
	t.Parallel()
	ctx := backendtest.Ctx(t)
	srvs := backendtest.StartNodes(t, 3)
	s := backendtest.OpenRedlock(t, backendtest.URLs(srvs), redlock.Options{NodeTimeout: backendtest.Roomy})
	list := strings.Join(sortedNames(srvs...), ",")
	require.NoError(t, s.Ping(ctx))

	require.NoError(t, srvs[0].Client().Del(ctx, setKey).Err())
	require.NoError(t, srvs[1].Client().Del(ctx, setKey).Err())
	// The next acquire finds two nodes serving no list: a node still
	// serves it, so they are marked at once, and the acquire runs again
	// there; but a node without a marker lost its data (here, by hand), so
	// the mark quarantines it on the node itself for the longest lease
	// (docs/safety.md, "Restarted nodes", rule Q): only the third counts.
	_, err := s.Acquire(ctx, "k", lockstore.AcquireRequest{Token: "t1", TTL: 10 * time.Second})
	require.ErrorIs(t, err, lockstore.ErrUnavailable)
	assert.Equal(t, list, marker(t, srvs[0]))
	assert.Equal(t, list, marker(t, srvs[1]))
	for i, srv := range srvs {
		left := srv.Client().PTTL(ctx, "lockgw:redlock:quarantine").Val()
		if i == 2 {
			assert.Less(t, left, time.Duration(0), "node 2 kept its marker")
			continue
		}
		assert.Greater(t, left, redlock.DefaultMaxTTL-time.Minute, "node %d quarantined on itself", i)
	}
	assert.Contains(t, err.Error(), "2 of 3 Redlock nodes are quarantined")
	for i, n := range s.Nodes()[:2] {
		assert.Contains(t, n.Quarantine, "lost its data", "node %d, for /readyz", i)
	}

	// Fresh nodes with one of them down: nothing is marked, nothing granted.
	fresh := backendtest.StartNodes(t, 3)
	fresh[2].Kill()
	f := backendtest.OpenRedlock(t, backendtest.URLs(fresh), redlock.Options{NodeTimeout: backendtest.Roomy})
	_, err = f.Acquire(ctx, "k", lockstore.AcquireRequest{Token: "t2", TTL: 10 * time.Second})
	require.ErrorIs(t, err, lockstore.ErrUnavailable)
	assert.Empty(t, marker(t, fresh[0]))
	assert.Empty(t, marker(t, fresh[1]))
	fresh[2].Start()
	// Alone it is granted within half a second (the prober's next PING
	// and refill); a make test's start, with loopback dials timing out,
	// took over 5 s: the wait is retryUnavailable's, as a client retries.
	_, err = retryUnavailable(func() error {
		_, err := f.Acquire(ctx, "k", lockstore.AcquireRequest{Token: "t2", TTL: 10 * time.Second})
		return err
	})
	require.NoError(t, err, "marked once every node answers")
}

// TestRedlockNodeListsStartTogether: gateways with two lists sharing nodes
// start at once on never-used nodes. At most one list ends up marked on its
// nodes, and the two never both hold a key.
func TestRedlockNodeListsStartTogether(t *testing.T) {
	t.Parallel()
	ctx := backendtest.Ctx(t)
	for round := range 5 {
		srvs := backendtest.StartNodes(t, 4)
		a, b, c, d := srvs[0], srvs[1], srvs[2], srvs[3]
		opened := make(chan *redlock.Store, 2)
		for _, urls := range [][]string{{a.URL(), b.URL(), c.URL()}, {a.URL(), b.URL(), d.URL()}} {
			go func() {
				s, err := redlock.Open(urls, redlock.Options{NodeTimeout: backendtest.Roomy})
				assert.NoError(t, err)
				opened <- s
			}()
		}
		s1, s2 := <-opened, <-opened
		t.Cleanup(func() { _ = s1.Close(); _ = s2.Close() })
		_, err1 := s1.Acquire(ctx, "k", lockstore.AcquireRequest{Token: "one", TTL: 10 * time.Second})
		_, err2 := s2.Acquire(ctx, "k", lockstore.AcquireRequest{Token: "two", TTL: 10 * time.Second})
		t.Logf("round %d: %v / %v; markers %q %q %q %q", round, err1, err2, marker(t, a), marker(t, b), marker(t, c), marker(t, d))
		assert.False(t, err1 == nil && err2 == nil, "round %d: both lists granted the key", round)
	}
}

func sortedNames(srvs ...*redistest.Server) []string {
	names := make([]string, len(srvs))
	for i, s := range srvs {
		names[i] = name(s)
	}
	slices.Sort(names)
	return names
}

// namesOf is how the node list names srvs: a store that reaches them
// through proxies of its own passes it as RedlockOptions.NodeNames, so that
// it and the stores reaching them directly serve one list.
func namesOf(srvs []*redistest.Server) []string {
	names := make([]string, len(srvs))
	for i, s := range srvs {
		names[i] = name(s)
	}
	return names
}

// serveList marks srvs as serving the list of their own names, as a
// deployment that ran before left them: for tests that open a store while
// some nodes are down.
func serveList(t testing.TB, srvs []*redistest.Server) {
	t.Helper()
	list := strings.Join(sortedNames(srvs...), ",")
	for _, s := range srvs {
		require.NoError(t, s.Client().Set(context.Background(), setKey, list, 0).Err())
	}
}

// TestRedlockFreshListsRace stages two lists starting on never-used nodes
// that share one node, a: a gateway B over {a,d,e} reads every node empty
// and marks them, but its path to a is slow, so a gateway A over {a,b,c}
// marks a first; B's marks on d and e are in place until B finds a taken
// and takes them back. In that moment a second gateway B2 over B's list,
// which cannot reach a, reads d and e. When a fresh pass marked committed
// at once, B2 saw its list on a majority and granted the key on {d,e}
// while A granted it on {a,b,c}. With tentative marks (rule W of
// docs/safety.md, "Changing the node list") B2 sees none committed and
// refuses.
func TestRedlockFreshListsRace(t *testing.T) {
	t.Parallel()
	srvs := backendtest.StartNodes(t, 5)
	a, b, c, d, e := srvs[0], srvs[1], srvs[2], srvs[3], srvs[4]
	const slow = 600 * time.Millisecond
	toA := redistest.NewProxy(t, a.Addr(), slow) // B's path to a
	listB := []string{name(a), name(d), name(e)}

	openedB := make(chan *redlock.Store, 1)
	start := time.Now()
	go func() {
		s, err := redlock.Open([]string{toA.URL(), d.URL(), e.URL()},
			redlock.Options{NodeTimeout: 2 * time.Second, NodeNames: listB})
		assert.NoError(t, err)
		openedB <- s
	}()
	// B read every node empty and has marked d and e; its mark of a is on
	// its way, `slow` long. A marks a first.
	require.Eventually(t, func() bool { return marker(t, d) != "" }, 10*time.Second, time.Millisecond, "B marks d")
	sa, err := redlock.Open([]string{a.URL(), b.URL(), c.URL()}, redlock.Options{NodeTimeout: backendtest.Roomy})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sa.Close() })
	// B has not yet heard that a is taken (its mark's answer takes `slow`
	// more): its marks on d and e are still there.
	t.Logf("markers at %v: a %q d %q e %q", time.Since(start).Round(time.Millisecond), marker(t, a), marker(t, d), marker(t, e))
	closed := "redis://127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)) + "/0" // B2 cannot reach a
	sb2, err := redlock.Open([]string{closed, d.URL(), e.URL()},
		redlock.Options{NodeTimeout: backendtest.Roomy, NodeNames: listB})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sb2.Close() })

	// A deadline per acquire: under make test's load the staging above
	// took 9 s of one shared with them, and A's acquire met its end.
	_, errA := sa.Acquire(backendtest.Ctx(t), "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 10 * time.Second})
	_, errB2 := sb2.Acquire(backendtest.Ctx(t), "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 10 * time.Second})
	t.Logf("A: %v; B2: %v", errA, errB2)
	assert.False(t, errA == nil && errB2 == nil, "two lists granted one key on majorities that share no node")
	require.NoError(t, errA, "A's list, committed on a, b and c, grants")

	sb := <-openedB
	t.Cleanup(func() { _ = sb.Close() })
	time.Sleep(time.Second) // B's pass has ended
	assert.Equal(t, "", marker(t, d), "B took back its tentative mark")
	assert.Equal(t, "", marker(t, e))
}

// TestRedlockRestartBeforeAnyGatewaySawIt is the case a gateway's memory
// of run_ids cannot see: X holds a key on a and b (c down); every gateway
// stops; a restarts empty and c comes back empty; a new gateway starts,
// trusting the first run_id it sees of each. Before nodes kept their own
// quarantine (docs/safety.md, "Restarted nodes", rule Q) it granted the key
// on {a, c} while X's hour ran: two holders.
func TestRedlockRestartBeforeAnyGatewaySawIt(t *testing.T) {
	t.Parallel()
	ctx := backendtest.Ctx(t)
	srvs := backendtest.StartNodes(t, 3)
	a, b, c := srvs[0], srvs[1], srvs[2]
	serveList(t, srvs)
	c.Kill()
	g1, err := redlock.Open(backendtest.URLs(srvs), redlock.Options{NodeTimeout: backendtest.Roomy, MaxTTL: time.Hour})
	require.NoError(t, err)
	x, err := g1.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Hour})
	require.NoError(t, err, "X on a and b")
	require.NoError(t, g1.Close())

	a.Restart()
	c.Start()
	g2, err := redlock.Open(backendtest.URLs(srvs), redlock.Options{NodeTimeout: backendtest.Roomy, MaxTTL: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = g2.Close() })
	for range 3 {
		_, err = g2.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
		require.Error(t, err, "a second holder while X (fence %d) holds the key for an hour", x.Fence)
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("refused: %v", err)
	q := 0
	for _, n := range g2.Nodes() {
		if !n.QuarantinedUntil.IsZero() {
			q++
			assert.Contains(t, n.Quarantine, "lost its data")
			assert.WithinDuration(t, time.Now().Add(time.Hour), n.QuarantinedUntil, 2*time.Minute)
		}
	}
	assert.Equal(t, 2, q, "a and c say they are quarantined: %+v", g2.Nodes())
	// b, with its data, is not: its marker stayed.
	assert.Zero(t, b.Client().Exists(ctx, "lockgw:redlock:quarantine").Val())
}

// TestRedlockSameListFreshPasses: gateways of one list that start at once
// on fresh nodes all serve it. A pass whose tentative mark found the list
// already committed there (a sibling's pass got there first) took that
// for another list's mark and closed its gateway, naming the same list as
// "the node list it was last used with" (the semaphore conformance suite
// found it, a few runs in six on a loaded machine).
func TestRedlockSameListFreshPasses(t *testing.T) {
	t.Parallel()
	for round := range 5 {
		srvs := backendtest.StartNodes(t, 3)
		stores := make([]*redlock.Store, 4)
		var wg sync.WaitGroup
		for i := range stores {
			wg.Go(func() {
				s, err := redlock.Open(backendtest.URLs(srvs), redlock.Options{NodeTimeout: backendtest.Roomy})
				if err == nil {
					stores[i] = s
				}
			})
		}
		wg.Wait()
		for i, s := range stores {
			require.NotNil(t, s, "round %d: gateway %d opened", round, i)
			t.Cleanup(func() { _ = s.Close() })
			// Nodes that did not answer in time (a loaded machine, dials of
			// fresh pools) are tried again; a gateway closed over the node
			// list answers with the list (QuorumError.NodeList) and fails.
			key, req := fmt.Sprintf("same-list-%d-%d", round, i), lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second}
			var err error
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				_, err = s.Acquire(backendtest.Ctx(t), key, req)
				qe, quorum := errors.AsType[*lockstore.QuorumError](err)
				if !quorum || qe.NodeList != "" || qe.Failed == 0 || time.Now().After(deadline) {
					break
				}
			}
			require.NoError(t, err, "round %d: gateway %d serves the list its siblings marked", round, i)
		}
	}
}

// TestRedlockNodeListTransition changes the list from {a,b,c} to {a,b,d}
// with gateways running (docs/safety.md, rule T): an old gateway over
// {a,b,c}, a transition gateway over {a,b,d} with {a,b,c} as its previous
// list, and a new gateway over {a,b,d}. The old one counts until the
// transition begins and never after; the new one counts only once the
// transition finished, which waits LOCKGW_MAX_TTL (plus drift) after it
// began, so every lease of the old list has ended; the transition gateway
// counts throughout, by majorities of both lists, so it meets both.
func TestRedlockNodeListTransition(t *testing.T) {
	t.Parallel()
	// A context per call: on a loaded machine the steps together can
	// take longer than one call's deadline.
	ctx := func() context.Context { return backendtest.Ctx(t) }
	srvs := backendtest.StartNodes(t, 4)
	a, b, c, d := srvs[0], srvs[1], srvs[2], srvs[3]
	const maxTTL = 1500 * time.Millisecond
	opts := redlock.Options{NodeTimeout: backendtest.Roomy, MaxTTL: maxTTL}
	oldURLs, newURLs := []string{a.URL(), b.URL(), c.URL()}, []string{a.URL(), b.URL(), d.URL()}
	oldList, newList := strings.Join(sortedNames(a, b, c), ","), strings.Join(sortedNames(a, b, d), ",")
	old := backendtest.OpenRedlock(t, oldURLs, opts)
	ready(t, old)
	oldLease, err := old.Acquire(ctx(), "before", lockstore.AcquireRequest{Token: "old-holder", TTL: maxTTL})
	require.NoError(t, err)

	began := time.Now()
	topts := opts
	topts.PreviousURLs = oldURLs
	trans, err := redlock.Open(newURLs, topts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = trans.Close() })
	for _, s := range srvs {
		assert.Equal(t, oldList+">"+newList, marker(t, s), "begin marks every node of both lists with the transition")
	}

	// Begin refuses the old gateway, naming the transition.
	_, err = old.Acquire(ctx(), "other", lockstore.AcquireRequest{Token: "old-late", TTL: time.Second})
	require.ErrorIs(t, err, lockstore.ErrRefused, "the old list counts no more once the transition began")
	err = old.Ping(ctx())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is in a transition from this gateway's node list")

	// The transition gateway sees the old lease (a majority of the old
	// list), and grants beside it by majorities of both lists; d sits out
	// its quarantine (it carried no marker), so {a,b} are those majorities.
	_, err = trans.Acquire(ctx(), "before", lockstore.AcquireRequest{Token: "trans-holder", TTL: time.Second})
	var held *lockstore.HeldError
	require.ErrorAs(t, err, &held, "a lease of the old list is held for the transition gateway")
	l, err := trans.Inspect(ctx(), "before")
	require.NoError(t, err)
	assert.Equal(t, oldLease.Fence, l.Fence)
	transLease, err := trans.Acquire(ctx(), "during", lockstore.AcquireRequest{Token: "trans-holder", TTL: time.Minute})
	require.NoError(t, err)
	assert.Greater(t, transLease.Fence, oldLease.Fence)
	// The old lease lasts MaxTTL only, so that the transition finishes
	// soon: a release answered before its conservative end must have
	// found it; one answered after (the steps above on a loaded machine)
	// may find it gone.
	_, err = retryUnavailable(func() error { return trans.Release(ctx(), "before", "old-holder") })
	if time.Now().Before(oldLease.ExpiresAt) {
		require.NoError(t, err, "a lease of the old list is released through the transition gateway")
	} else if err != nil {
		require.ErrorIs(t, err, lockstore.ErrNotHeld, "the old lease ran out before its release")
		t.Logf("the old lease ran out before its release (%v after its end)", time.Since(oldLease.ExpiresAt))
	}

	// The new gateway waits for the finish. (On a loaded machine the
	// steps above can take longer than the settle: what was answered while
	// no node carried the new list yet must be a refusal.)
	newer := backendtest.OpenRedlock(t, newURLs, opts)
	_, err = newer.Acquire(ctx(), "new", lockstore.AcquireRequest{Token: "new-holder", TTL: time.Second})
	pingErr := newer.Ping(ctx())
	if marker(t, a) != newList && marker(t, b) != newList && marker(t, d) != newList {
		require.ErrorIs(t, err, lockstore.ErrUnavailable, "before the transition finished")
		require.Error(t, pingErr)
		assert.Contains(t, pingErr.Error(), "is in a transition from the node list")
	} else {
		t.Logf("the transition finished before the new gateway's first request (%s after begin): its refusal is not checked", time.Since(began))
	}

	// Finish: the new list on a, b and d once the settle keys on a
	// majority of {a,b,c} are gone, never sooner.
	for marker(t, a) != newList {
		require.Less(t, time.Since(began), 10*time.Second, "the transition did not finish")
		time.Sleep(20 * time.Millisecond)
	}
	finished := time.Since(began)
	t.Logf("finished %s after it began", finished)
	assert.GreaterOrEqual(t, finished, maxTTL, "the transition finished before every lease of the old list could have ended")
	require.Eventually(t, func() bool { return marker(t, b) == newList && marker(t, d) == newList }, 5*time.Second, 20*time.Millisecond)
	assert.Equal(t, oldList+">"+newList, marker(t, c), "c is in the old list only: it keeps the transition")

	// Now the new gateway counts, and meets the transition gateway's
	// lease on the new list's majority.
	require.Eventually(t, func() bool { return newer.Ping(ctx()) == nil }, 5*time.Second, 50*time.Millisecond)
	_, err = newer.Acquire(ctx(), "during", lockstore.AcquireRequest{Token: "new-holder", TTL: time.Second})
	require.ErrorAs(t, err, &held, "the transition gateway's lease holds a majority of the new list")
	newLease, err := newer.Acquire(ctx(), "after", lockstore.AcquireRequest{Token: "new-holder", TTL: time.Minute})
	require.NoError(t, err)
	_, err = trans.Acquire(ctx(), "after", lockstore.AcquireRequest{Token: "trans-holder", TTL: time.Second})
	require.ErrorAs(t, err, &held, "and the other way round")
	assert.Greater(t, newLease.Fence, transLease.Fence)
	_, err = old.Acquire(ctx(), "old-again", lockstore.AcquireRequest{Token: "old-late", TTL: time.Second})
	require.ErrorIs(t, err, lockstore.ErrRefused, "the old list never counts again")
	require.NoError(t, newer.Release(ctx(), "during", "trans-holder"))
	require.NoError(t, trans.Release(ctx(), "after", "new-holder"))
}

// A transition gateway whose previous list is not what the nodes serve
// grants nothing and says why.
func TestRedlockTransitionFromAnotherList(t *testing.T) {
	t.Parallel()
	// A context per call: on a loaded machine the steps together can
	// take longer than one call's deadline.
	ctx := func() context.Context { return backendtest.Ctx(t) }
	srvs := backendtest.StartNodes(t, 4)
	a, b, c, d := srvs[0], srvs[1], srvs[2], srvs[3]
	opts := redlock.Options{NodeTimeout: backendtest.Roomy}
	serving := backendtest.OpenRedlock(t, []string{a.URL(), b.URL(), c.URL()}, opts)
	ready(t, serving)
	topts := opts
	topts.PreviousURLs = []string{a.URL(), b.URL(), d.URL()}
	trans := backendtest.OpenRedlock(t, []string{a.URL(), c.URL(), d.URL()}, topts)
	_, err := trans.Acquire(ctx(), "k", lockstore.AcquireRequest{Token: "x", TTL: time.Second})
	require.ErrorIs(t, err, lockstore.ErrRefused)
	err = trans.Ping(ctx())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the previous list must be the one the nodes serve")
	require.NoError(t, serving.Ping(ctx()), "the nodes' list is untouched")
	assert.Equal(t, strings.Join(sortedNames(a, b, c), ","), marker(t, a))
}
