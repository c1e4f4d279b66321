package redlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// From the adversarial review of rule T (at 424b9d2). Each test stages one
// interleaving on real redis-servers; O = {a,b,c}, N = {a,b,d}. The first
// and the third failed there.

// TestRedlockTransitionSettleOutlivesOldMaxTTL: the settle key must
// outlive a lease of an *old* gateway, bounded by the old gateway's
// LOCKGW_MAX_TTL, whatever the transition gateway's is. At 424b9d2 it lived
// the transition gateway's: an old gateway (MAX_TTL 1m) granted k to X for
// 20 s on {b,c}; a transition gateway (MAX_TTL 1s) began, finished about a
// second later, and a new gateway granted k to Y on {a,d}: two holders.
// Now every node knows the longest LOCKGW_MAX_TTL of the gateways that
// used it (lockgw:redlock:maxttl; an old gateway votes only on a node that
// knows its own), and settle keys last at least that: the transition does
// not finish while X's lease may live, and the new gateway grants nothing.
func TestRedlockTransitionSettleOutlivesOldMaxTTL(t *testing.T) {
	t.Parallel()
	// A context per call: on a loaded machine the steps together can
	// take longer than one call's deadline.
	ctx := func() context.Context { return backendtest.Ctx(t) }
	srvs := backendtest.StartNodes(t, 4)
	a, b, c, d := srvs[0], srvs[1], srvs[2], srvs[3]
	oldURLs, newURLs := []string{a.URL(), b.URL(), c.URL()}, []string{a.URL(), b.URL(), d.URL()}
	newList := strings.Join(sortedNames(a, b, d), ",")

	old := backendtest.OpenRedlock(t, oldURLs, redlock.Options{NodeTimeout: backendtest.Roomy, MaxTTL: time.Minute})
	ready(t, old)
	a.Pause()
	x, err := old.Acquire(ctx(), "k", lockstore.AcquireRequest{Token: "old-holder-XXXXXXXXXXXX", TTL: 20 * time.Second})
	a.Resume()
	require.NoError(t, err, "b and c are a majority of the old list")

	const short = time.Second // the new deployment's LOCKGW_MAX_TTL
	topts := redlock.Options{NodeTimeout: backendtest.Roomy, MaxTTL: short, PreviousURLs: oldURLs}
	trans := backendtest.OpenRedlock(t, newURLs, topts)
	_, err = trans.Acquire(ctx(), "k", lockstore.AcquireRequest{Token: "trans-holder-XXXXXXXXXX", TTL: short})
	var held *lockstore.HeldError
	require.ErrorAs(t, err, &held, "the transition gateway sees X's lease on a majority of O")

	newer := backendtest.OpenRedlock(t, newURLs, redlock.Options{NodeTimeout: backendtest.Roomy, MaxTTL: short})
	// Three of the transition gateway's settle periods, and its marking
	// passes (one a second) with them.
	for deadline := time.Now().Add(3 * short); time.Now().Before(deadline); {
		y, err := newer.Acquire(ctx(), "k", lockstore.AcquireRequest{Token: "new-holder-XXXXXXXXXXXX", TTL: short})
		if err == nil {
			t.Fatalf("two holders of k: X (fence %d) holds until %s, %s from now; Y (fence %d) was granted until %s",
				x.Fence, x.ExpiresAt.Format(time.RFC3339Nano), time.Until(x.ExpiresAt).Round(time.Millisecond),
				y.Fence, y.ExpiresAt.Format(time.RFC3339Nano))
		}
		time.Sleep(50 * time.Millisecond)
	}
	assert.NotEqual(t, newList, marker(t, a), "the transition must not finish while an old lease may live")
	require.True(t, time.Now().Before(x.ExpiresAt), "X's lease is still valid (the test ran too slowly to say)")
}

// TestRedlockTransitionRetryOfOldLease: a lease of the old list held on
// {b,c} (a majority of O, no majority of N); the holder's PUT through a
// transition gateway reaches every node and takes the key across both
// lists, as a new grant (201) with a higher fence: a round keeps a
// confirmed fence only when it finds it on a quorum, and keeping it from a
// majority of the old list alone could answer a fence below a later
// holder's after a stale copy. docs/api.md lists this exception to "a
// retry keeps its fence".
func TestRedlockTransitionRetryOfOldLease(t *testing.T) {
	t.Parallel()
	// A context per call: on a loaded machine the steps together can
	// take longer than one call's deadline.
	ctx := func() context.Context { return backendtest.Ctx(t) }
	srvs := backendtest.StartNodes(t, 4)
	a, b, c, d := srvs[0], srvs[1], srvs[2], srvs[3]
	oldURLs, newURLs := []string{a.URL(), b.URL(), c.URL()}, []string{a.URL(), b.URL(), d.URL()}
	opts := redlock.Options{NodeTimeout: backendtest.Roomy, MaxTTL: time.Minute}

	old := backendtest.OpenRedlock(t, oldURLs, opts)
	ready(t, old)
	a.Pause()
	x, err := old.Acquire(ctx(), "k", lockstore.AcquireRequest{Token: "old-holder-XXXXXXXXXXXX", TTL: 30 * time.Second})
	a.Resume()
	require.NoError(t, err)

	topts := opts
	topts.PreviousURLs = oldURLs
	trans := backendtest.OpenRedlock(t, newURLs, topts)
	var l lockstore.Lease
	_, err = retryUnavailable(func() (err error) { // a read, retried as a client would under load
		l, err = trans.Inspect(ctx(), "k")
		return err
	})
	require.NoError(t, err)
	require.Equal(t, x.Fence, l.Fence, "the transition gateway reads X's lease")

	again, err := trans.Acquire(ctx(), "k", lockstore.AcquireRequest{Token: "old-holder-XXXXXXXXXXXX", TTL: 30 * time.Second})
	require.NoError(t, err, "the holder's PUT takes its key across both lists (rule T)")
	assert.False(t, again.Renewed, "a new grant (201): the lease held no majority of the new list")
	assert.Greater(t, again.Fence, x.Fence, "with a fence above the old lease's")
	_, err = trans.Extend(ctx(), "k", "old-holder-XXXXXXXXXXXX", 30*time.Second)
	require.NoError(t, err, "it now holds a majority of both lists: an extend through the transition gateway succeeds")
}

// TestRedlockTransitionReleasedThroughNewGateway: after the finish,
// transition gateways and new gateways run side by side (docs/operations.md,
// step 4). A lease granted by a transition gateway holds a majority of both
// lists; a DELETE through a new gateway is answered 204 once it deleted a
// majority of N ({a,d}; b did not answer), leaving the lease on {b,c}: a
// majority of O. At 424b9d2 transition gateways still saw it held (a GET
// answered the released lease, another token's PUT was refused) for the
// rest of its TTL. Now a transition gateway that saw the finish counts by
// the new list alone, as the new gateways do.
func TestRedlockTransitionReleasedThroughNewGateway(t *testing.T) {
	t.Parallel()
	// A context per call: on a loaded machine the steps together can
	// take longer than one call's deadline.
	ctx := func() context.Context { return backendtest.Ctx(t) }
	srvs := backendtest.StartNodes(t, 4)
	a, b, c, d := srvs[0], srvs[1], srvs[2], srvs[3]
	oldURLs, newURLs := []string{a.URL(), b.URL(), c.URL()}, []string{a.URL(), b.URL(), d.URL()}
	newList := strings.Join(sortedNames(a, b, d), ",")
	const maxTTL = 2 * time.Second
	old := backendtest.OpenRedlock(t, oldURLs, redlock.Options{NodeTimeout: backendtest.Roomy, MaxTTL: maxTTL})
	ready(t, old)
	trans := backendtest.OpenRedlock(t, newURLs, redlock.Options{NodeTimeout: backendtest.Roomy, MaxTTL: maxTTL, PreviousURLs: oldURLs})
	require.Eventually(t, func() bool { return marker(t, a) == newList && marker(t, d) == newList },
		raceSlowdown*8*time.Second, 20*time.Millisecond)
	newer := backendtest.OpenRedlock(t, newURLs, redlock.Options{NodeTimeout: backendtest.Roomy, MaxTTL: maxTTL})
	// Ready: both gateways warmed up and answering. The race detector on
	// a loaded machine stretches the warm-up (one CI run took over 5 s);
	// the test is about what follows.
	require.Eventually(t, func() bool { return newer.Ping(ctx()) == nil && trans.Ping(ctx()) == nil },
		raceSlowdown*5*time.Second, 50*time.Millisecond)

	x, err := trans.Acquire(ctx(), "k", lockstore.AcquireRequest{Token: "x-holder-XXXXXXXXXXXXXX", TTL: maxTTL})
	require.NoError(t, err)
	b.Pause()
	err = newer.Release(ctx(), "k", x.Token)
	b.Resume()
	require.NoError(t, err, "204: deleted on a and d, a majority of the new list")

	l, err := trans.Inspect(ctx(), "k")
	assert.ErrorIs(t, err, lockstore.ErrNotHeld, "released (204), yet the transition gateway reads it held: %+v", l)
	_, err = trans.Acquire(ctx(), "k", lockstore.AcquireRequest{Token: "y-holder-XXXXXXXXXXXXXX", TTL: maxTTL})
	assert.NoError(t, err, "released (204), yet the transition gateway refuses the key to another token")
}
