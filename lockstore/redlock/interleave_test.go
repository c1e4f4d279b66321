package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests stage the interleavings Redlock must survive: a request's
// work still on its way to a node after the request answered, and two
// requests with the same token at once. Two Redlock stores over the same
// nodes stand for two gateways; a delaying proxy stands for a slow link.
// Each asserts that a third client Q is NOT granted the key while the token
// holds a valid lease. The staged ones do not run in parallel with other
// tests: their timing is the point.

// proxied returns the nodes' URLs, those in via through a delaying proxy
// (no delay to start with: SetDelay), and the proxies by node.
func proxied(t *testing.T, srvs []*redistest.Server, via ...int) ([]string, map[int]*redistest.Proxy) {
	urls := backendtest.URLs(srvs)
	proxies := make(map[int]*redistest.Proxy)
	for _, i := range via {
		proxies[i] = redistest.NewProxy(t, srvs[i].Addr(), 0)
		urls[i] = proxies[i].URL()
	}
	return urls, proxies
}

// nodesOf is s's view of its nodes, for a failure's message: whether a
// call that kept failing met nodes marked down or nodes that were asked
// and did not answer.
func nodesOf(s any) string {
	if n, ok := s.(interface{ Nodes() []lockstore.NodeStatus }); ok {
		return fmt.Sprintf("%+v", n.Nodes())
	}
	return "unknown"
}

// retryUnavailable runs op, and again while it answers unavailable, for
// up to 20 s: a warm-up's calls are retried as a client would, until the
// connections they open are up. A count of tries was not enough: five in
// 250 ms all answered "5 of 5 Redlock nodes did not answer" in a loaded
// CI series (load 9 on 2 cores).
func retryUnavailable(op func() error) (retried bool, err error) {
	deadline := time.Now().Add(20 * time.Second)
	err = op()
	for errors.Is(err, lockstore.ErrUnavailable) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		err, retried = op(), true
	}
	return retried, err
}

// releasedEverywhere releases a key and reads it back, each retried as a
// client would while unavailable: the release must succeed (or, retried,
// find its first attempt's work done) and the read find nothing held.
func releasedEverywhere(t *testing.T, key string, release, read func() error) {
	t.Helper()
	retried, err := retryUnavailable(release)
	if !retried || !errors.Is(err, lockstore.ErrNotHeld) {
		require.NoError(t, err, "%s: release", key)
	}
	_, err = retryUnavailable(read)
	require.ErrorIs(t, err, lockstore.ErrNotHeld, "%s: released on every node", key)
}

// warm opens connections in s's pools with a burst of acquires on keys of
// their own, so that no staged request waits for a new connection's
// handshake (which a slow link would time out). An acquire or release
// answered unavailable is tried again with its token, as a client would:
// under load the burst's own handshakes outlast the short node timeout
// ("3 of 5 Redlock nodes did not answer" in a loaded make test), which is
// what the warm-up is for, not what the tests examine.
func warm(t *testing.T, s lockstore.Store) {
	t.Helper()
	retry := retryUnavailable
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			key := "warm" + strconv.Itoa(i)
			token := lockstore.NewToken()
			_, err := retry(func() error {
				_, err := s.Acquire(backendtest.Ctx(t), key, lockstore.AcquireRequest{Token: token, TTL: time.Second})
				return err
			})
			if assert.NoError(t, err, "nodes: %s", nodesOf(s)) {
				retried, err := retry(func() error { return s.Release(backendtest.Ctx(t), key, token) })
				if retried && errors.Is(err, lockstore.ErrNotHeld) {
					err = nil // the attempt answered unavailable did release it
				}
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
}

// ready waits until s answers Ping: connections open, scripts loaded.
func ready(t *testing.T, s *redlock.Store) {
	t.Helper()
	// A fresh store's first Ping warms every node (a pool of connections
	// each, the scripts loaded): on a busy machine that can outlast one
	// call's context, so it is asked again, as a load balancer would.
	for end := time.Now().Add(30 * time.Second); ; {
		err := s.Ping(backendtest.Ctx(t))
		if err == nil {
			return
		}
		require.True(t, time.Now().Before(end), "not ready in 30 s: %v", err)
		time.Sleep(10 * time.Millisecond)
	}
}

// assertNotGranted asserts that a newcomer cannot take key while the
// token's lease (ending at until) is valid.
func assertNotGranted(t *testing.T, s lockstore.Store, key string, until time.Time) {
	t.Helper()
	req := lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second}
	var l lockstore.Lease
	_, err := retryUnavailable(func() (err error) { // a loaded machine's timeouts
		l, err = s.Acquire(backendtest.Ctx(t), key, req)
		return err
	})
	if err == nil && time.Now().Before(until) {
		t.Fatalf("Q was granted %s (fence %d) while the token's lease is valid for %v more", key, l.Fence, time.Until(until))
	}
	require.ErrorIs(t, err, lockstore.ErrHeld)
}

// A release answered while its part for a slow node is still on the wire;
// the token takes the key again through another gateway on a bare majority
// that includes the slow node. Whatever reaches the slow node late must
// not delete the new grant.
func TestRedlockLateReleaseKeepsLaterGrant(t *testing.T) {
	// The straggler's delay is long enough that a loaded machine's release,
	// its retries and the re-acquire all fit before it lands.
	const timeout, delay = 250 * time.Millisecond, 1500 * time.Millisecond
	srvs := backendtest.StartNodes(t, 5)
	urlsA, slow := proxied(t, srvs, 4)
	a := backendtest.OpenRedlock(t, urlsA, redlock.Options{NodeTimeout: timeout, NodeNames: namesOf(srvs)})
	// Gateway B reaches nodes 0 and 1 through links that will be cut.
	urlsB, cut := proxied(t, srvs, 0, 1)
	b := backendtest.OpenRedlock(t, urlsB, redlock.Options{NodeTimeout: timeout, NodeNames: namesOf(srvs)})
	q := backendtest.OpenRedlock(t, backendtest.URLs(srvs), redlock.Options{NodeTimeout: timeout})
	for _, s := range []*redlock.Store{a, b, q} {
		ready(t, s)
		warm(t, s)
	}
	ctx := backendtest.Ctx(t)
	token := lockstore.NewToken()

	_, err := b.Acquire(ctx, "k", lockstore.AcquireRequest{Token: token, TTL: 5 * time.Second})
	require.NoError(t, err)
	slow[4].SetDelay(delay)
	// Released on nodes 0-3; node 4's part is on the wire. A release a
	// loaded machine answered unavailable (a live node's answer past the
	// short node timeout) is retried, as a client would: each attempt
	// leaves its own straggler, and the staging times from the last.
	released := time.Now()
	err = a.Release(ctx, "k", token)
	for deadline := time.Now().Add(20 * time.Second); errors.Is(err, lockstore.ErrUnavailable) && time.Now().Before(deadline); {
		released = time.Now()
		err = a.Release(ctx, "k", token)
	}
	require.NoError(t, err, "released on nodes 0-3")

	// B loses nodes 0 and 1: the token's new grant is nodes 2, 3 and 4.
	cut[0].Close()
	cut[1].Close()
	var l lockstore.Lease
	_, err = retryUnavailable(func() (err error) { // a loaded machine's timeouts
		l, err = b.Acquire(ctx, "k", lockstore.AcquireRequest{Token: token, TTL: 5 * time.Second})
		return err
	})
	require.NoError(t, err)
	require.Less(t, time.Since(released), delay, "the re-acquire must come before the straggler lands; the machine is too slow for this staging")
	time.Sleep(2*delay - time.Since(released)) // whatever was on the wire to node 4 has landed

	assertNotGranted(t, q, "k", l.ExpiresAt)
}

// An acquire whose round times out (every node behind a slow link) answers
// ErrUnavailable; the client retries with the same token through another
// gateway and is granted. The first round's scripts and its clean-up land
// afterwards: they must not take the retry's lease away.
func TestRedlockRetryAfterUnavailable(t *testing.T) {
	const timeout, delay = 100 * time.Millisecond, 300 * time.Millisecond
	srvs := backendtest.StartNodes(t, 5)
	urlsA, slow := proxied(t, srvs, 0, 1, 2, 3, 4)
	a := backendtest.OpenRedlock(t, urlsA, redlock.Options{NodeTimeout: timeout, NodeNames: namesOf(srvs)})
	b := backendtest.OpenRedlock(t, backendtest.URLs(srvs), redlock.Options{NodeTimeout: timeout})
	for _, s := range []*redlock.Store{a, b} {
		ready(t, s)
		warm(t, s)
	}
	ctx := backendtest.Ctx(t)
	token := lockstore.NewToken()

	for _, p := range slow {
		p.SetDelay(delay)
	}
	start := time.Now()
	_, err := a.Acquire(ctx, "k", lockstore.AcquireRequest{Token: token, TTL: 5 * time.Second})
	require.ErrorIs(t, err, lockstore.ErrUnavailable)
	var l lockstore.Lease
	_, err = retryUnavailable(func() (err error) { // a loaded machine's timeouts
		l, err = b.Acquire(ctx, "k", lockstore.AcquireRequest{Token: token, TTL: 5 * time.Second})
		return err
	})
	require.NoError(t, err)
	time.Sleep(3*delay - time.Since(start)) // the first round's scripts and clean-up have landed

	assertNotGranted(t, b, "k", l.ExpiresAt)
}

// An extend finds the lease gone and cleans up, while the same token takes
// the key again through another gateway: the clean-up must not delete the
// new grant.
func TestRedlockFailedExtendKeepsConcurrentGrant(t *testing.T) {
	const delay = 100 * time.Millisecond
	srvs := backendtest.StartNodes(t, 5)
	urlsA, slow := proxied(t, srvs, 0, 1, 2, 3, 4)
	a := backendtest.OpenRedlock(t, urlsA, redlock.Options{NodeTimeout: time.Second, NodeNames: namesOf(srvs)})
	b := backendtest.OpenRedlock(t, backendtest.URLs(srvs), redlock.Options{NodeTimeout: time.Second})
	for _, s := range []*redlock.Store{a, b} {
		ready(t, s)
		warm(t, s)
	}
	for _, p := range slow {
		p.SetDelay(delay)
	}
	ctx := backendtest.Ctx(t)
	token := lockstore.NewToken()

	// The extend's scripts land at +delay and find nothing; its answers
	// are back at +2 delay, and any clean-up lands at +3 delay. The token
	// takes the key again in between.
	var extendErr error
	var wg sync.WaitGroup
	wg.Go(func() { _, extendErr = a.Extend(ctx, "k", token, 5*time.Second) })
	time.Sleep(delay + delay/2)
	l, err := b.Acquire(ctx, "k", lockstore.AcquireRequest{Token: token, TTL: 5 * time.Second})
	require.NoError(t, err)
	wg.Wait()
	require.ErrorIs(t, extendErr, lockstore.ErrNotHeld)
	time.Sleep(delay) // a clean-up would have landed

	assertNotGranted(t, b, "k", l.ExpiresAt)
}

// Twins: clients contend for one key through two gateways, each sending
// every acquire twice at once with the same token (a retry of a request
// believed lost while the first is still in flight). No fault at all.
// Whichever twins are granted, the client holds the lease until it
// releases it: no other client may be granted the key meanwhile.
func TestRedlockSameTokenTwins(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	srvs := backendtest.StartNodes(t, 5)
	gws := []*redlock.Store{
		backendtest.OpenRedlock(t, backendtest.URLs(srvs), redlock.Options{NodeTimeout: backendtest.Roomy}),
		backendtest.OpenRedlock(t, backendtest.URLs(srvs), redlock.Options{NodeTimeout: backendtest.Roomy}),
	}
	ready(t, gws[0])
	ready(t, gws[1])

	var rec recorder
	var holdLost sync.Map
	var pairs, split atomic.Int64 // twins both granted, and those answered two fences
	// Every fence answered to a holder's twins, with when the holder was
	// granted: each must be above every earlier holder's fences and below
	// every later one's (docs/safety.md, "What a fence promises to twins").
	type holderFences struct {
		granted time.Time
		fences  []int64
	}
	var fencesMu sync.Mutex
	var holders []holderFences
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for c := range 6 {
		wg.Go(func() {
			for ctx.Err() == nil {
				token := lockstore.NewToken()
				var leases [2]lockstore.Lease
				var errs [2]error
				var twins sync.WaitGroup
				for i := range 2 {
					twins.Go(func() {
						actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
						defer cancel()
						leases[i], errs[i] = gws[(c+i)%2].Acquire(actx, "k", lockstore.AcquireRequest{Token: token, TTL: ttl})
					})
				}
				twins.Wait()
				granted := time.Now()
				if errs[0] == nil && errs[1] == nil {
					pairs.Add(1)
					if leases[0].Fence != leases[1].Fence {
						split.Add(1)
					}
				}
				var l lockstore.Lease
				for i := range 2 {
					if errs[i] == nil && (l.Token == "" || leases[i].ExpiresAt.Before(l.ExpiresAt)) {
						l = leases[i]
					}
				}
				if l.Token == "" {
					time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
					continue
				}
				h := holderFences{granted: granted}
				for i := range 2 {
					if errs[i] == nil {
						h.fences = append(h.fences, leases[i].Fence)
					}
				}
				fencesMu.Lock()
				holders = append(holders, h)
				fencesMu.Unlock()
				time.Sleep(30 * time.Millisecond)
				rec.addUntil(l, granted, time.Now())
				// Released as a client would, again while unavailable (one
				// under make test's load reached 1 of 5 nodes in time).
				_, err := retryUnavailable(func() error {
					rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
					defer rcancel()
					return gws[c%2].Release(rctx, "k", token)
				})
				if err != nil && !errors.Is(err, lockstore.ErrNotHeld) {
					holdLost.Store(granted, err)
				}
			}
		})
	}
	// 60 grants take a few seconds alone; make test's load has taken over 30.
	require.Eventually(t, func() bool { return rec.count(time.Time{}, time.Now()) >= 60 }, 90*time.Second, 10*time.Millisecond)
	cancel()
	wg.Wait()
	n := rec.count(time.Time{}, time.Now())
	t.Logf("%d grants to twins; %d twin pairs both granted, %d of them with two fences", n, pairs.Load(), split.Load())
	assert.Empty(t, rec.violations())
	slices.SortFunc(holders, func(a, b holderFences) int { return a.granted.Compare(b.granted) })
	for i := 1; i < len(holders); i++ {
		prev, next := slices.Max(holders[i-1].fences), slices.Min(holders[i].fences)
		assert.Less(t, prev, next, "holder %d's fences %v are not all above the previous holder's %v", i, holders[i].fences, holders[i-1].fences)
	}
	holdLost.Range(func(k, v any) bool {
		t.Errorf("a release of a held lease failed: %v", v)
		return true
	})
}

// TestRedlockTwinsShareOneFence sends two acquires of one token at once (a
// client's retry while its first request is in flight), many times, through
// one gateway and through two, and three at once through two gateways: each
// round reaches every node, in any order per node. Twins both granted must
// answer one fence (docs/api.md: a PUT whose token already holds the lock
// answers its fence), which the lock then carries; a release frees the key.
// Before the fix, a round granted anew on a majority took the highest fence
// of all its votes, its twin's new ones included, while the twin,
// re-granted on a majority, kept the highest fence of the values it
// re-granted: one token, two fences (about one set in two).
func TestRedlockTwinsShareOneFence(t *testing.T) {
	srvs := backendtest.StartNodes(t, 5)
	a := backendtest.OpenRedlock(t, backendtest.URLs(srvs), redlock.Options{NodeTimeout: backendtest.Roomy})
	b := backendtest.OpenRedlock(t, backendtest.URLs(srvs), redlock.Options{NodeTimeout: backendtest.Roomy})
	for _, s := range []*redlock.Store{a, b} {
		ready(t, s)
		warm(t, s)
	}
	for _, gw := range []struct {
		name string
		via  []*redlock.Store
	}{
		{"OneGateway", []*redlock.Store{a, a}},
		{"TwoGateways", []*redlock.Store{a, b}},
		{"ThreeTwins", []*redlock.Store{a, b, a}},
	} {
		t.Run(gw.name, func(t *testing.T) {
			const sets = 100
			split, granted := 0, 0
			for i := range sets {
				ctx := backendtest.Ctx(t) // a deadline per set: 100 outlasted one 10 s context under make test's load
				key := gw.name + strconv.Itoa(i)
				req := lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 5 * time.Second}
				fences := twinFences(t, len(gw.via), func(j int) (int64, error) {
					l, err := gw.via[j].Acquire(ctx, key, req)
					return l.Fence, err
				})
				if len(fences) > 1 {
					split++
					t.Errorf("%s: the twins were answered fences %v", key, fences)
				}
				// The reads and the release are retried as a client would
				// (the twins' acquires are not: their answers are the test).
				if len(fences) > 0 {
					granted++
					var l lockstore.Lease
					_, err := retryUnavailable(func() (err error) {
						l, err = b.Inspect(ctx, key)
						return err
					})
					require.NoError(t, err)
					assert.True(t, fences[l.Fence], "%s: the lock carries the fence answered (%d, answered %v)", key, l.Fence, fences)
				}
				releasedEverywhere(t, key,
					func() error { return b.Release(ctx, key, req.Token) },
					func() error { _, err := a.Inspect(ctx, key); return err })
			}
			t.Logf("%d of %d twin sets split (%d granted)", split, sets, granted)
		})
	}
}

// slowNodes is a Redlock over five nodes whose last two answer through
// proxies: they run each command at once, and their replies are two node
// timeouts late until the test sets the proxies' reply delay to 0.
func slowNodes(t *testing.T) (*redlock.Store, []*redistest.Server, []*redistest.Proxy) {
	t.Helper()
	srvs := backendtest.StartNodes(t, 5)
	urls := backendtest.URLs(srvs)
	var proxies []*redistest.Proxy
	for i := 3; i < 5; i++ {
		p := redistest.NewProxy(t, srvs[i].Addr(), 0)
		proxies = append(proxies, p)
		urls[i] = p.URL()
	}
	s := backendtest.OpenRedlock(t, urls, redlock.Options{NodeTimeout: backendtest.Roomy})
	// Each step with a deadline of its own: on a loaded machine the
	// warm-up of five nodes used up a deadline shared with the grant.
	ready(t, s)
	// A grant first, while the replies are quick: each node's clock is
	// sampled (rule D), as on a gateway that has been serving.
	warm, err := s.Acquire(backendtest.Ctx(t), "warm", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
	require.NoError(t, err)
	require.NoError(t, s.Release(backendtest.Ctx(t), warm.Key, warm.Token))
	for _, p := range proxies {
		p.SetReplyDelay(2 * backendtest.Roomy)
	}
	return s, srvs, proxies
}

// stagedAhead stages the grant of a retry test on slowNodes: stage(key)
// plants counters ahead on nodes 3 and 4 and acquires key, which must be
// granted (on 0-2), and landed(srv, key) tells whether the round's acquire
// also ran on srv. Under make test's load a vote through the proxy can
// reach its node after rule D's deadline and write nothing there, which
// stages nothing: then it stages again on a fresh key, at most three
// times. It returns the key staged.
func stagedAhead(t *testing.T, srvs []*redistest.Server, stage func(key string) error, landed func(srv *redistest.Server, key string) bool) string {
	t.Helper()
	for try := range 3 {
		key := "k" + strconv.Itoa(try)
		require.NoError(t, stage(key), "0-2 are a majority")
		missed := ""
		for _, srv := range srvs[3:] {
			if !landed(srv, key) {
				missed = srv.Addr()
			}
		}
		if missed == "" {
			return key
		}
		t.Logf("staging %s: the round's acquire did not run on %s (its vote came after its deadline); again on a new key", key, missed)
	}
	t.Fatal("the round's acquire did not run on nodes 3 and 4 in three stagings")
	return ""
}

// twinFences runs n twin acquires at once (acquire(j) is twin j, answering
// its fence) and returns the fences of those granted. A twin may fail only
// with "outcome unknown".
func twinFences(t *testing.T, n int, acquire func(j int) (int64, error)) map[int64]bool {
	t.Helper()
	got := make([]int64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for j := range n {
		wg.Go(func() { got[j], errs[j] = acquire(j) })
	}
	wg.Wait()
	fences := make(map[int64]bool)
	for j, err := range errs {
		if err != nil {
			require.ErrorIs(t, err, lockstore.ErrUnavailable, "a twin may answer only 'outcome unknown'")
			continue
		}
		fences[got[j]] = true
	}
	return fences
}

// Issue 26, hole 3: a retry sent after the answer arrived, answered 200,
// carries the answered fence. Nodes 3 and 4 vote 3 s ahead of the gateway's
// seed (a counter planted ahead stands for their clocks: the vote is the
// same) and their replies are late during the grant (slowNodes), so it is
// granted on 0-2 with F while 3 and 4 hold values above F the round never
// heard of. A retry re-granted on all five took the highest of the values
// its maker made, above F. (Before rule D the staging paused 3 and 4, and
// the round's acquires landed after its answer; they now write nothing.)
func TestRedlockRetryKeepsConfirmedFence(t *testing.T) {
	t.Parallel()
	s, srvs, proxies := slowNodes(t)
	ctx := backendtest.Ctx(t)
	req := lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute}
	var first lockstore.Lease
	k := stagedAhead(t, srvs, func(k string) (err error) {
		ahead := strconv.FormatInt(time.Now().Add(3*time.Second).UnixMicro(), 10)
		for _, srv := range srvs[3:] {
			require.NoError(t, srv.Client().Set(ctx, "lockgw:{"+k+"}:fence", ahead, time.Minute).Err())
		}
		first, err = s.Acquire(ctx, k, req)
		return err
	}, func(srv *redistest.Server, k string) bool {
		// 3 and 4 ran the round's acquire: values of the token above F.
		v, _ := srv.Client().Get(ctx, "lockgw:{"+k+"}:lock").Result()
		return strings.HasPrefix(v, digest(req.Token))
	})
	for _, p := range proxies {
		p.SetReplyDelay(0)
	}
	time.Sleep(2 * backendtest.Roomy) // the late replies are read and dropped

	again, err := s.Acquire(ctx, k, req)
	require.NoError(t, err)
	assert.True(t, again.Renewed, "re-granted on a majority: 200")
	assert.Equal(t, first.Fence, again.Fence, "a retry after the answer keeps the fence (%d ahead of it)", again.Fence-first.Fence)
	l, err := s.Inspect(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, first.Fence, l.Fence, "the lock carries it")
}
