package lockstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/lockstore"
)

// Review of rule T (424b9d2). Each test stages one interleaving on real
// redis-servers; O = {a,b,c}, N = {a,b,d}.

// TestRedlockTransitionSettleOutlivesOldMaxTTL: the settle key lives the
// *transition gateway's* LOCKGW_MAX_TTL plus drift, but what it must outlive
// is a lease of an *old* gateway, bounded by the old gateway's
// LOCKGW_MAX_TTL. Nothing in docs/operations.md asks for one value on
// every gateway, and docs/safety.md and backends.md advise lowering it (it
// is how long a restarted node sits out), which is naturally done with the
// new deployment. Interleaving:
//
//  1. an old gateway (MAX_TTL 1m) grants k to X for 20 s on {b,c} (a was
//     paused at the grant);
//  2. a transition gateway (MAX_TTL 1s) begins: settle keys of ~1 s;
//  3. ~1 s later it finishes: N on a, b, d;
//  4. a new gateway over {a,b,d} grants k to Y on {a,d}: X's lease has
//     ~18 s left. Two holders.
func TestRedlockTransitionSettleOutlivesOldMaxTTL(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	srvs := startNodes(t, 4)
	a, b, c, d := srvs[0], srvs[1], srvs[2], srvs[3]
	oldURLs, newURLs := []string{a.URL(), b.URL(), c.URL()}, []string{a.URL(), b.URL(), d.URL()}
	newList := strings.Join(sortedNames(a, b, d), ",")

	old := openRedlock(t, oldURLs, lockstore.RedlockOptions{NodeTimeout: roomy, MaxTTL: time.Minute})
	require.NoError(t, old.Ping(ctx))
	a.Pause()
	x, err := old.Acquire(ctx, "k", lockstore.AcquireRequest{Token: "old-holder-XXXXXXXXXXXX", TTL: 20 * time.Second})
	a.Resume()
	require.NoError(t, err, "b and c are a majority of the old list")

	const short = time.Second // the new deployment's LOCKGW_MAX_TTL
	topts := lockstore.RedlockOptions{NodeTimeout: roomy, MaxTTL: short, PreviousURLs: oldURLs}
	trans := openRedlock(t, newURLs, topts)
	_, err = trans.Acquire(ctx, "k", lockstore.AcquireRequest{Token: "trans-holder-XXXXXXXXXX", TTL: short})
	var held *lockstore.HeldError
	require.ErrorAs(t, err, &held, "the transition gateway sees X's lease on a majority of O")

	require.Eventually(t, func() bool { return marker(t, a) == newList && marker(t, d) == newList },
		8*time.Second, 20*time.Millisecond, "the transition finishes after the transition gateway's MAX_TTL")
	newer := openRedlock(t, newURLs, lockstore.RedlockOptions{NodeTimeout: roomy, MaxTTL: short})
	require.Eventually(t, func() bool { return newer.Ping(ctx) == nil }, 5*time.Second, 50*time.Millisecond)

	y, err := newer.Acquire(ctx, "k", lockstore.AcquireRequest{Token: "new-holder-XXXXXXXXXXXX", TTL: short})
	if err == nil {
		t.Errorf("two holders of k: X (fence %d) holds until %s, %s from now; Y (fence %d) was granted until %s",
			x.Fence, x.ExpiresAt.Format(time.RFC3339Nano), time.Until(x.ExpiresAt).Round(time.Millisecond),
			y.Fence, y.ExpiresAt.Format(time.RFC3339Nano))
	}
	require.True(t, time.Now().Before(x.ExpiresAt), "X's lease is still valid (the test ran too slowly to say)")
}

// TestRedlockTransitionRetryKeepsFence: docs/api.md promises that a retry
// sent after the previous answer arrived gets the same fence "on Redlock
// when it reaches a majority of the nodes that granted the lease", and
// rule T says a PUT with the holder's token renews a lease granted before
// the transition. A lease of the old list held on {b,c} (a majority of O,
// no majority of N): a retry through a transition gateway reaches every
// node, including both that granted it, and is answered 201 with a new
// fence: roundFence takes the confirmed fence only when it is confirmed on
// a quorum of both lists.
func TestRedlockTransitionRetryKeepsFence(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	srvs := startNodes(t, 4)
	a, b, c, d := srvs[0], srvs[1], srvs[2], srvs[3]
	oldURLs, newURLs := []string{a.URL(), b.URL(), c.URL()}, []string{a.URL(), b.URL(), d.URL()}
	opts := lockstore.RedlockOptions{NodeTimeout: roomy, MaxTTL: time.Minute}

	old := openRedlock(t, oldURLs, opts)
	require.NoError(t, old.Ping(ctx))
	a.Pause()
	x, err := old.Acquire(ctx, "k", lockstore.AcquireRequest{Token: "old-holder-XXXXXXXXXXXX", TTL: 30 * time.Second})
	a.Resume()
	require.NoError(t, err)

	topts := opts
	topts.PreviousURLs = oldURLs
	trans := openRedlock(t, newURLs, topts)
	l, err := trans.Inspect(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, x.Fence, l.Fence, "the transition gateway reads X's lease")

	again, err := trans.Acquire(ctx, "k", lockstore.AcquireRequest{Token: "old-holder-XXXXXXXXXXXX", TTL: 30 * time.Second})
	require.NoError(t, err, "the holder's PUT renews its lease across both lists (rule T)")
	assert.True(t, again.Renewed, "a sequential retry that reached every node of the lease is a renewal (200)")
	assert.Equal(t, x.Fence, again.Fence, "and keeps its fence (docs/api.md, Safe retries)")
}

// TestRedlockTransitionReleasedThroughNewGateway: after the finish,
// transition gateways and new gateways run side by side (docs/operations.md,
// step 4). A lease granted by a transition gateway holds a majority of both
// lists; a DELETE through a new gateway is answered 204 once it deleted a
// majority of N ({a,d}; b did not answer), leaving the lease on {b,c}: a
// majority of O. Transition gateways then still see it held: a GET answers
// the released lease, and another token's PUT is refused as held, for the
// rest of the released lease's TTL.
func TestRedlockTransitionReleasedThroughNewGateway(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	srvs := startNodes(t, 4)
	a, b, c, d := srvs[0], srvs[1], srvs[2], srvs[3]
	oldURLs, newURLs := []string{a.URL(), b.URL(), c.URL()}, []string{a.URL(), b.URL(), d.URL()}
	newList := strings.Join(sortedNames(a, b, d), ",")
	const maxTTL = 2 * time.Second
	old := openRedlock(t, oldURLs, lockstore.RedlockOptions{NodeTimeout: roomy, MaxTTL: maxTTL})
	require.NoError(t, old.Ping(ctx))
	trans := openRedlock(t, newURLs, lockstore.RedlockOptions{NodeTimeout: roomy, MaxTTL: maxTTL, PreviousURLs: oldURLs})
	require.Eventually(t, func() bool { return marker(t, a) == newList && marker(t, d) == newList },
		8*time.Second, 20*time.Millisecond)
	newer := openRedlock(t, newURLs, lockstore.RedlockOptions{NodeTimeout: roomy, MaxTTL: maxTTL})
	require.Eventually(t, func() bool { return newer.Ping(ctx) == nil && trans.Ping(ctx) == nil }, 5*time.Second, 50*time.Millisecond)

	x, err := trans.Acquire(ctx, "k", lockstore.AcquireRequest{Token: "x-holder-XXXXXXXXXXXXXX", TTL: maxTTL})
	require.NoError(t, err)
	b.Pause()
	err = newer.Release(ctx, "k", x.Token)
	b.Resume()
	require.NoError(t, err, "204: deleted on a and d, a majority of the new list")

	l, err := trans.Inspect(ctx, "k")
	assert.ErrorIs(t, err, lockstore.ErrNotHeld, "released (204), yet the transition gateway reads it held: %+v", l)
	_, err = trans.Acquire(ctx, "k", lockstore.AcquireRequest{Token: "y-holder-XXXXXXXXXXXXXX", TTL: maxTTL})
	assert.NoError(t, err, "released (204), yet the transition gateway refuses the key to another token")
}
