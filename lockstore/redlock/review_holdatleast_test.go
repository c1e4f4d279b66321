package redlock_test

import (
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/redlock"
	"github.com/stretchr/testify/require"
)

// TestReviewRedlockRenewalDropsHoldAtLeast (review, rule L): on Redlock a
// renewal (a PUT with the holder's token) writes a new value on a node that
// lacks the lease, and that value carries the renewal's hold-at-least (none
// here), not the first grant's. docs/api.md: "A renewal ... keeps the
// first grant's end", and a DELETE before then leaves the key held by
// nobody, every PUT answering 409. The staging, 3 nodes, q = 2:
//
//  1. d is granted with HoldAtLeast 6 s, TTL 2 s, through gateway B, which
//     cannot reach node 2: the lease (with its end T) is on nodes 0 and 1.
//  2. d renews (same token, no hold_at_least_ms) through gateway A: nodes 0
//     and 1 renew, node 2 gets a new value of its own, without T (its vote,
//     seeded from the later round's start, is above the lease's fence, so
//     the round's C answers "above" and leaves it unconfirmed).
//  3. d releases through gateway C, which cannot reach node 1: node 0
//     lingers until T, node 2 deletes: 204 (q nodes released).
//  4. Node 1's copy runs out at its TTL (2 s); a newcomer is granted on
//     nodes 1 and 2, about 4 s before T.
func TestReviewRedlockRenewalDropsHoldAtLeast(t *testing.T) {
	srvs := backendtest.StartNodes(t, 3)
	names := namesOf(srvs)
	const timeout = 300 * time.Millisecond
	a := backendtest.OpenRedlock(t, backendtest.URLs(srvs), redlock.Options{NodeTimeout: timeout, NodeNames: names})
	urlsB, cutB := proxied(t, srvs, 2)
	b := backendtest.OpenRedlock(t, urlsB, redlock.Options{NodeTimeout: timeout, NodeNames: names})
	urlsC, cutC := proxied(t, srvs, 1)
	c := backendtest.OpenRedlock(t, urlsC, redlock.Options{NodeTimeout: timeout, NodeNames: names})
	for _, s := range []*redlock.Store{a, b, c} {
		ready(t, s)
		warm(t, s)
	}
	cutB[2].Close()
	cutC[1].Close()
	ctx := backendtest.Ctx(t)
	const key, ttl, atLeast = "cron", 2 * time.Second, 6 * time.Second
	token := lockstore.NewToken()

	granted := time.Now()
	l, err := b.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: ttl, HoldAtLeast: atLeast, Owner: "job"})
	require.NoError(t, err, "granted on nodes 0 and 1")
	r, err := a.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: ttl, Owner: "job"})
	require.NoError(t, err, "renewed")
	require.Equal(t, l.Fence, r.Fence)
	require.NoError(t, c.Release(ctx, key, token), "released on nodes 0 and 2")

	// Node 1's copy of the lease ends at its TTL; T is 6 s after the grant.
	time.Sleep(ttl + 300*time.Millisecond)
	q, err := a.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
	if err == nil && time.Since(granted) < atLeast-time.Second {
		t.Fatalf("a newcomer was granted %s (fence %d) %v after a grant with HoldAtLeast %v that its holder released: the key was to stay held by nobody until then",
			key, q.Fence, time.Since(granted), atLeast)
	}
	require.ErrorIs(t, err, lockstore.ErrHeld)
}
