// Package lockstoretest is the conformance suite every lockstore.Store runs,
// so that the backends cannot drift apart.
package lockstoretest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

// Run runs the suite against the store newStore returns. newStore may
// return the same store every time; the suite uses a fresh key per test.
func Run(t *testing.T, newStore func(t *testing.T) lockstore.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s lockstore.Store, key string)
	}{
		{"AcquireGrantsLease", testAcquire},
		{"AcquireHeldByAnother", testConflict},
		{"AcquireSameTokenRenews", testSameToken},
		{"Extend", testExtend},
		{"ExtendWithoutTTLKeepsTheLeaseLength", testExtendOwnLength},
		{"ExtendNeverShortens", testExtendNeverShortens},
		{"ExtendAfterExpiryFails", testExtendAfterExpiry},
		{"ExtendByStrangerFails", testExtendByStranger},
		{"Release", testRelease},
		{"ReleaseByStrangerFails", testReleaseByStranger},
		{"ReleaseNotHeld", testReleaseNotHeld},
		{"HoldAtLeast", testHoldAtLeast},
		{"HoldAtLeastPassed", testHoldAtLeastPassed},
		{"Inspect", testInspect},
		{"FencesIncrease", testFences},
		{"TTLExpiry", testExpiry},
		{"KeysAreIndependent", testIndependentKeys},
		{"ConcurrentAcquireOneWinner", testConcurrentAcquire},
		{"InvalidRequests", testInvalid},
		{"CancelledContext", testCancelled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t), key(t))
		})
	}
}

var keySeq atomic.Int64

// key makes a key no other test (or earlier run against the same Redis) uses.
func key(t *testing.T) string {
	return fmt.Sprintf("conformance/%s/%d-%d", t.Name(), time.Now().UnixNano(), keySeq.Add(1))
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c
}

// acquire takes key with a fresh token, retrying with it while the store
// answers unavailable, as a client retries a 503 (a Redlock round on a
// loaded machine may confirm too slowly for a short TTL; five retries at
// once met the nodes a missed round had marked down, "3 of 3 Redlock
// nodes did not answer", before their prober heard them again).
func acquire(t *testing.T, s lockstore.Store, key string, ttl time.Duration) lockstore.Lease {
	t.Helper()
	req := lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: ttl}
	var l lockstore.Lease
	require.NoError(t, whileUnavailable(func() (err error) {
		l, err = s.Acquire(ctx(t), key, req)
		return err
	}))
	return l
}

// whileUnavailable runs op, and again every 50 ms while it answers
// unavailable, for up to 20 s: as a client retries a 503 with the same
// token. On a loaded machine a call can outlast its timeout or rule D's
// deadline ("LOCKGW_LATE", "3 of 5 Redlock nodes did not answer"), which is
// not what the suite examines; a retry finds what the unavailable attempt
// may have left, as the retry contract says.
func whileUnavailable(op func() error) error {
	err := op()
	for deadline := time.Now().Add(20 * time.Second); errors.Is(err, lockstore.ErrUnavailable) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		err = op()
	}
	return err
}

func testAcquire(t *testing.T, s lockstore.Store, key string) {
	token := lockstore.NewToken()
	before := time.Now()
	l, err := s.Acquire(ctx(t), key, lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second, Owner: "worker-7"})
	after := time.Now()
	require.NoError(t, err)

	assert.Equal(t, key, l.Key)
	assert.Equal(t, token, l.Token)
	assert.Equal(t, "worker-7", l.Owner)
	assert.Positive(t, l.Fence)
	assert.Equal(t, 10*time.Second, l.Granted)
	assert.False(t, l.Renewed)
	// Conservative expiry: after the request started, never after the
	// latest moment the store could have applied the TTL.
	assert.False(t, l.ExpiresAt.After(after.Add(10*time.Second)), "expires_at %v later than possible", l.ExpiresAt)
	assert.True(t, l.ExpiresAt.After(before.Add(9*time.Second)), "expires_at %v too early", l.ExpiresAt)
}

func testConflict(t *testing.T, s lockstore.Store, key string) {
	acquire(t, s, key, 10*time.Second)

	_, err := s.Acquire(ctx(t), key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
	require.ErrorIs(t, err, lockstore.ErrHeld)
	var held *lockstore.HeldError
	require.ErrorAs(t, err, &held)
	assert.Greater(t, held.Remaining, 9*time.Second)
	assert.LessOrEqual(t, held.Remaining, 10*time.Second)
}

func testSameToken(t *testing.T, s lockstore.Store, key string) {
	// The retry comes halfway through the first lease. On a loaded machine
	// it can reach the store after the lease ended (its answer came after
	// the lease's end), when a fresh grant is right: then again, on a
	// fresh key and a lease twice as long.
	for ttl := 300 * time.Millisecond; ; ttl *= 2 {
		token := lockstore.NewToken()
		first, err := s.Acquire(ctx(t), key, lockstore.AcquireRequest{Token: token, TTL: ttl, Owner: "a"})
		require.NoError(t, err)
		time.Sleep(ttl / 2)

		sent := time.Now()
		again, err := s.Acquire(ctx(t), key, lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second, Owner: "a"})
		require.NoError(t, err)
		if !again.Renewed && time.Now().After(first.ExpiresAt) && ttl < 5*time.Second {
			t.Logf("a retry %v into a %v lease was answered after it ended: again with %v", ttl/2, ttl, 2*ttl)
			key += "+"
			continue
		}
		assert.True(t, again.Renewed)
		assert.Equal(t, first.Fence, again.Fence, "a retried acquire keeps its fence")

		// The TTL was reset to the new value: still held well after the
		// first TTL, however late the store applied it.
		time.Sleep(time.Until(sent.Add(ttl + 150*time.Millisecond)))
		l, err := s.Inspect(ctx(t), key)
		require.NoError(t, err)
		assert.Equal(t, first.Fence, l.Fence)
		assert.Greater(t, l.Left, 10*time.Second-time.Since(sent)-500*time.Millisecond)
		return
	}
}

func testExtend(t *testing.T, s lockstore.Store, key string) {
	// A short lease, extended before it ends, must outlive its first TTL.
	// On a loaded machine the extend can reach the store after the short
	// lease ended (its answer came after the lease's end): the store then
	// rightly refuses, and the test runs again on a lease twice as long.
	for ttl := 200 * time.Millisecond; ; ttl *= 2 {
		l := acquire(t, s, key, ttl)
		sent := time.Now() // the lease was granted before it
		ext, err := s.Extend(ctx(t), key, l.Token, 10*time.Second)
		if errors.Is(err, lockstore.ErrNotHeld) && time.Now().After(l.ExpiresAt) && ttl < 5*time.Second {
			t.Logf("extend of a %v lease answered %v after it ended: again with %v", ttl, time.Since(l.ExpiresAt), 2*ttl)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, l.Fence, ext.Fence)
		assert.Equal(t, 10*time.Second, ext.Granted)

		// Past the original TTL, however late the store applied it.
		time.Sleep(time.Until(sent.Add(ttl + 100*time.Millisecond)))
		got, err := s.Inspect(ctx(t), key)
		require.NoError(t, err, "an extended lock outlives its first TTL")
		assert.Equal(t, l.Fence, got.Fence)
		assert.Greater(t, got.Left, 10*time.Second-time.Since(sent)-500*time.Millisecond)
		return
	}
}

// An Extend with a ttl of 0 applies the length the lease was last granted
// or extended with, never a default (issue 14 item 3).
func testExtendOwnLength(t *testing.T, s lockstore.Store, key string) {
	l := acquire(t, s, key, 60*time.Second)
	ext, err := s.Extend(ctx(t), key, l.Token, 0)
	require.NoError(t, err)
	assert.Equal(t, l.Fence, ext.Fence)
	assert.Equal(t, 60*time.Second, ext.Granted, "the granted length, not a default")
	got, err := s.Inspect(ctx(t), key)
	require.NoError(t, err)
	assert.Greater(t, got.Left, 55*time.Second)

	// After an explicit extend, that length is the lease's own.
	_, err = s.Extend(ctx(t), key, l.Token, 90*time.Second)
	require.NoError(t, err)
	ext, err = s.Extend(ctx(t), key, l.Token, 0)
	require.NoError(t, err)
	assert.Equal(t, 90*time.Second, ext.Granted)

	// A retried acquire of the same token re-grants with its TTL.
	_, err = s.Acquire(ctx(t), key, lockstore.AcquireRequest{Token: l.Token, TTL: 2 * time.Minute})
	require.NoError(t, err)
	ext, err = s.Extend(ctx(t), key, l.Token, 0)
	require.NoError(t, err)
	assert.Equal(t, 2*time.Minute, ext.Granted)
	got, err = s.Inspect(ctx(t), key)
	require.NoError(t, err)
	assert.Equal(t, l.Fence, got.Fence)
	assert.Greater(t, got.Left, 110*time.Second)

	_, err = s.Extend(ctx(t), key, lockstore.NewToken(), 0)
	require.ErrorIs(t, err, lockstore.ErrTokenMismatch)
}

// An extend or a renewal asking for less time than the lease has left
// does not shorten it: the holder is told the shorter time, the least it
// holds, and the lease keeps its later expiry (docs/safety.md, "Late
// writes on redis", rule V1: an extend that lands late must not cut a
// lease a later extend was answered for).
func testExtendNeverShortens(t *testing.T, s lockstore.Store, key string) {
	l := acquire(t, s, key, 10*time.Second)
	ext, err := s.Extend(ctx(t), key, l.Token, 100*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, 100*time.Millisecond, ext.Granted)
	assert.False(t, ext.ExpiresAt.After(time.Now().Add(100*time.Millisecond)), "the holder is told the time it asked for, no more")
	renewed, err := s.Acquire(ctx(t), key, lockstore.AcquireRequest{Token: l.Token, TTL: 100 * time.Millisecond})
	require.NoError(t, err)
	assert.True(t, renewed.Renewed)
	assert.Equal(t, l.Fence, renewed.Fence)

	time.Sleep(300 * time.Millisecond)
	got, err := s.Inspect(ctx(t), key)
	require.NoError(t, err, "the lease kept its later expiry")
	assert.Equal(t, l.Fence, got.Fence)
	assert.Greater(t, got.Left, 8*time.Second)
	_, err = s.Acquire(ctx(t), key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
	require.ErrorIs(t, err, lockstore.ErrHeld)
}

func testExtendAfterExpiry(t *testing.T, s lockstore.Store, key string) {
	l := acquire(t, s, key, 50*time.Millisecond)
	time.Sleep(120 * time.Millisecond)

	_, err := s.Extend(ctx(t), key, l.Token, 10*time.Second)
	require.ErrorIs(t, err, lockstore.ErrNotHeld)
	_, err = s.Inspect(ctx(t), key)
	require.ErrorIs(t, err, lockstore.ErrNotHeld, "a failed extend must not bring the lock back")
}

func testExtendByStranger(t *testing.T, s lockstore.Store, key string) {
	l := acquire(t, s, key, 10*time.Second)
	_, err := s.Extend(ctx(t), key, lockstore.NewToken(), time.Minute)
	require.ErrorIs(t, err, lockstore.ErrTokenMismatch)

	got, err := s.Inspect(ctx(t), key)
	require.NoError(t, err)
	assert.Equal(t, l.Fence, got.Fence)
	assert.LessOrEqual(t, got.Left, 10*time.Second, "a stranger's extend must not change the TTL")
}

func testRelease(t *testing.T, s lockstore.Store, key string) {
	l := acquire(t, s, key, 10*time.Second)
	require.NoError(t, s.Release(ctx(t), key, l.Token))

	_, err := s.Inspect(ctx(t), key)
	require.ErrorIs(t, err, lockstore.ErrNotHeld)
	next := acquire(t, s, key, time.Second) // free for the next holder at once
	assert.Greater(t, next.Fence, l.Fence)
}

func testReleaseByStranger(t *testing.T, s lockstore.Store, key string) {
	l := acquire(t, s, key, 10*time.Second)
	require.ErrorIs(t, s.Release(ctx(t), key, lockstore.NewToken()), lockstore.ErrTokenMismatch)

	got, err := s.Inspect(ctx(t), key)
	require.NoError(t, err, "the lock stays held")
	assert.Equal(t, l.Fence, got.Fence)
}

func testReleaseNotHeld(t *testing.T, s lockstore.Store, key string) {
	require.ErrorIs(t, s.Release(ctx(t), key, lockstore.NewToken()), lockstore.ErrNotHeld)

	l := acquire(t, s, key, 10*time.Second)
	require.NoError(t, s.Release(ctx(t), key, l.Token))
	require.ErrorIs(t, s.Release(ctx(t), key, l.Token), lockstore.ErrNotHeld, "a second release finds nothing")
}

// testHoldAtLeast: a lease granted with HoldAtLeast and released sooner
// keeps the key from every token, its own too, until HoldAtLeast after the
// grant (docs/safety.md, rule L); its token's retried release and extend
// find nothing held; then the key is free, with a higher fence.
func testHoldAtLeast(t *testing.T, s lockstore.Store, key string) {
	const atLeast = 1500 * time.Millisecond
	token := lockstore.NewToken()
	start := time.Now()
	l, err := s.Acquire(ctx(t), key, lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second, Owner: "cron", HoldAtLeast: atLeast})
	require.NoError(t, err)
	assert.Equal(t, "cron", l.Owner, "the hold-at-least end is not part of the owner")
	require.NoError(t, s.Release(ctx(t), key, token), "the release is answered as any release")

	got, err := s.Inspect(ctx(t), key)
	require.NoError(t, err, "released before its hold-at-least end: the key stays held")
	assert.Equal(t, "cron", got.Owner)
	assert.Equal(t, l.Fence, got.Fence)
	assert.LessOrEqual(t, got.Left, atLeast, "until the hold-at-least end, not the lease's")

	require.ErrorIs(t, s.Release(ctx(t), key, token), lockstore.ErrNotHeld, "a retried release finds its lease released")
	_, err = s.Extend(ctx(t), key, token, time.Second)
	require.ErrorIs(t, err, lockstore.ErrNotHeld, "an extend cannot bring it back")
	for _, tok := range []string{token, lockstore.NewToken()} {
		_, err = s.Acquire(ctx(t), key, lockstore.AcquireRequest{Token: tok, TTL: time.Second})
		var held *lockstore.HeldError
		require.ErrorAs(t, err, &held, "nobody takes the key before the hold-at-least end, its releaser neither")
		assert.LessOrEqual(t, held.Remaining, atLeast)
	}

	// Free once the end has passed (a Redlock node lets it go by its own
	// clock; retry a moment for the drift).
	time.Sleep(time.Until(start.Add(atLeast)))
	var next lockstore.Lease
	require.Eventually(t, func() bool {
		next, err = s.Acquire(ctx(t), key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
		return err == nil
	}, 2*time.Second, 20*time.Millisecond, "free once the hold-at-least end passed: %v", err)
	assert.GreaterOrEqual(t, time.Since(start), atLeast-50*time.Millisecond)
	assert.Greater(t, next.Fence, l.Fence)
}

// testHoldAtLeastPassed: released after its hold-at-least end, a lease
// goes at once, as any release.
func testHoldAtLeastPassed(t *testing.T, s lockstore.Store, key string) {
	token := lockstore.NewToken()
	_, err := s.Acquire(ctx(t), key, lockstore.AcquireRequest{Token: token, TTL: 10 * time.Second, HoldAtLeast: 50 * time.Millisecond})
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, s.Release(ctx(t), key, token))
	_, err = s.Inspect(ctx(t), key)
	require.ErrorIs(t, err, lockstore.ErrNotHeld)
	acquire(t, s, key, time.Second)
}

func testInspect(t *testing.T, s lockstore.Store, key string) {
	_, err := s.Inspect(ctx(t), key)
	require.ErrorIs(t, err, lockstore.ErrNotHeld)

	sent := time.Now()
	granted, err := s.Acquire(ctx(t), key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 10 * time.Second, Owner: "checkout-3"})
	require.NoError(t, err)
	// The grant's end is conservative (docs/safety.md, rule E): from
	// before its write reached the store, less the allowance for the
	// store's clock. The inspect's is what the store read: later than the
	// grant's by up to that allowance and the grant's round trip.
	rtt := time.Since(sent)
	time.Sleep(50 * time.Millisecond)
	got, err := s.Inspect(ctx(t), key)
	require.NoError(t, err)
	assert.Equal(t, key, got.Key)
	assert.Empty(t, got.Token, "inspect never reveals the token")
	assert.Equal(t, "checkout-3", got.Owner)
	assert.Equal(t, granted.Fence, got.Fence)
	assert.Equal(t, 10*time.Second, got.Granted, "the length it was granted with")
	assert.Less(t, got.Left, 10*time.Second-40*time.Millisecond, "Left is the time left")
	assert.Greater(t, got.Left, 8*time.Second)
	assert.False(t, got.ExpiresAt.After(granted.ExpiresAt.Add(script.Drift(10*time.Second)+rtt+5*time.Millisecond)),
		"inspect's expiry is at most the clock allowance and the grant's round trip after the grant's")
}

func testFences(t *testing.T, s lockstore.Store, key string) {
	var fences []int64
	// New holders after a release, after an expiry, and after both.
	l := acquire(t, s, key, 10*time.Second)
	fences = append(fences, l.Fence)
	require.NoError(t, s.Release(ctx(t), key, l.Token))

	l = acquire(t, s, key, 30*time.Millisecond)
	fences = append(fences, l.Fence)
	time.Sleep(80 * time.Millisecond)

	for range 5 {
		l = acquire(t, s, key, 10*time.Second)
		fences = append(fences, l.Fence)
		require.NoError(t, s.Release(ctx(t), key, l.Token))
	}
	for i := 1; i < len(fences); i++ {
		assert.Greater(t, fences[i], fences[i-1], "fence %d after %d", fences[i], fences[i-1])
	}
}

func testExpiry(t *testing.T, s lockstore.Store, key string) {
	for ttl := 400 * time.Millisecond; ; ttl *= 2 {
		l := acquire(t, s, key, ttl)
		acquired := time.Now()

		// Judge by the lease's own end of validity: under Redlock it is the
		// TTL less the time the acquire took and the drift allowance.
		time.Sleep(time.Until(l.ExpiresAt.Add(-100 * time.Millisecond)))
		_, err := s.Acquire(ctx(t), key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
		if err == nil {
			// Granted: the store must have seen the lease ended, so the
			// answer came after its end. Then the probe came too late to
			// judge (a loaded machine): again, on a fresh key and a lease
			// twice as long.
			require.True(t, time.Now().After(l.ExpiresAt), "granted while the lease was valid for %v more", time.Until(l.ExpiresAt))
			require.Less(t, ttl, 5*time.Second, "every probe before the lease's end was answered after it")
			t.Logf("a probe %v before the end of a %v lease was answered after it: again with %v", 100*time.Millisecond, ttl, 2*ttl)
			key += "+"
			continue
		}
		require.ErrorIs(t, err, lockstore.ErrHeld, "still held before its TTL")

		// Past the TTL, however late the store applied it.
		time.Sleep(time.Until(acquired.Add(ttl + 150*time.Millisecond)))
		_, err = s.Inspect(ctx(t), key)
		require.ErrorIs(t, err, lockstore.ErrNotHeld, "free after its TTL")
		acquire(t, s, key, time.Second)
		return
	}
}

func testIndependentKeys(t *testing.T, s lockstore.Store, key string) {
	a := acquire(t, s, key+"/a", 10*time.Second)
	b := acquire(t, s, key+"/b", 10*time.Second)
	require.ErrorIs(t, s.Release(ctx(t), key+"/a", b.Token), lockstore.ErrTokenMismatch)
	require.NoError(t, s.Release(ctx(t), key+"/a", a.Token))
	_, err := s.Inspect(ctx(t), key+"/b")
	require.NoError(t, err)
}

func testConcurrentAcquire(t *testing.T, s lockstore.Store, key string) {
	const n = 20
	var wg sync.WaitGroup
	var won, held atomic.Int64
	for range n {
		wg.Go(func() {
			_, err := s.Acquire(ctx(t), key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 10 * time.Second})
			switch {
			case err == nil:
				won.Add(1)
			case assert.ErrorIs(t, err, lockstore.ErrHeld):
				held.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(1), won.Load())
	assert.Equal(t, int64(n-1), held.Load())
}

func testInvalid(t *testing.T, s lockstore.Store, key string) {
	_, err := s.Acquire(ctx(t), key, lockstore.AcquireRequest{TTL: time.Second})
	require.ErrorIs(t, err, lockstore.ErrInvalid, "empty token")
	_, err = s.Acquire(ctx(t), key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Millisecond})
	require.ErrorIs(t, err, lockstore.ErrInvalid, "ttl below the minimum")
	_, err = s.Acquire(ctx(t), "", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
	require.ErrorIs(t, err, lockstore.ErrInvalid, "empty key")
	_, err = s.Extend(ctx(t), key, "", time.Second)
	require.ErrorIs(t, err, lockstore.ErrInvalid, "extend without a token")
	require.ErrorIs(t, s.Release(ctx(t), key, ""), lockstore.ErrInvalid, "release without a token")
}

func testCancelled(t *testing.T, s lockstore.Store, key string) {
	c, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Acquire(c, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Inspect(ctx(t), key)
	require.ErrorIs(t, err, lockstore.ErrNotHeld, "a cancelled acquire takes nothing")
}
