package lockstoretest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/lockstore"
)

// RunQuota runs the per-user quota part of the suite (AcquireRequest.Quota)
// against a store that counts live locks per user. Each call of newStore
// may return another instance on the same data (another client of the same
// Redis: another gateway), and the counts must hold across them.
func RunQuota(t *testing.T, newStore func(t *testing.T) lockstore.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, a, b lockstore.Store, key, user string)
	}{
		{"CapIsExact", testQuotaExact},
		{"ConcurrentGrantsStopAtTheCap", testQuotaConcurrent},
		{"OtherUsersUnaffected", testQuotaOtherUsers},
		{"SameTokenRenewalCountsOnce", testQuotaRenewal},
		{"ReleaseFreesAPlace", testQuotaRelease},
		{"ExpiryFreesAPlace", testQuotaExpiry},
		{"ExtendMovesTheExpiry", testQuotaExtend},
		{"AnotherIdentityActsOnTheUsersCount", testQuotaOtherIdentity},
		{"HeldKeyIsHeld", testQuotaHeld},
		{"WaiterOverQuotaGivesUp", testQuotaWaiter},
		{"InvalidQuota", testQuotaInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := key(t)
			tc.fn(t, newStore(t), newStore(t), k, "user:"+k+":{odd}%3A")
		})
	}
}

func take(c context.Context, s lockstore.Store, key, user string, max int, ttl time.Duration) (lockstore.Lease, error) {
	return s.Acquire(c, key, lockstore.AcquireRequest{
		Token: lockstore.NewToken(), TTL: ttl, Quota: lockstore.Quota{User: user, Max: max},
	})
}

// fill takes n locks for user on key/0 … key/n-1, alternating between the
// stores, and returns them.
func fill(t *testing.T, a, b lockstore.Store, key, user string, max, n int, ttl time.Duration) []lockstore.Lease {
	t.Helper()
	var ls []lockstore.Lease
	for i := range n {
		s := a
		if i%2 == 1 {
			s = b
		}
		l, err := take(ctx(t), s, key+"/"+string(rune('a'+i)), user, max, ttl)
		require.NoError(t, err, "lock %d of %d", i+1, n)
		ls = append(ls, l)
	}
	return ls
}

func requireOverQuota(t *testing.T, err error, max int) *lockstore.CapError {
	t.Helper()
	require.ErrorIs(t, err, lockstore.ErrUserQuota)
	capErr, ok := err.(*lockstore.CapError)
	require.True(t, ok, "%T is not a *CapError", err)
	assert.Equal(t, max, capErr.Max)
	return capErr
}

func testQuotaExact(t *testing.T, a, b lockstore.Store, key, user string) {
	fill(t, a, b, key, user, 3, 3, 10*time.Second)
	for _, s := range []lockstore.Store{a, b} {
		_, err := take(ctx(t), s, key+"/over", user, 3, time.Second)
		capErr := requireOverQuota(t, err, 3)
		assert.Greater(t, capErr.Next, 9*time.Second, "the earliest lock expires in about 10 s")
		assert.LessOrEqual(t, capErr.Next, 10*time.Second)
	}
	_, err := a.Inspect(ctx(t), key+"/over")
	require.ErrorIs(t, err, lockstore.ErrNotHeld, "a refused acquire takes nothing")
	_, err = take(ctx(t), a, key+"/over", user, 4, time.Second)
	require.NoError(t, err, "a higher cap admits one more")
}

func testQuotaConcurrent(t *testing.T, a, b lockstore.Store, key, user string) {
	const n, max = 24, 5
	var wg sync.WaitGroup
	var won, over atomic.Int64
	for i := range n {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			req := lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 10 * time.Second, Quota: lockstore.Quota{User: user, Max: max}}
			err := whileUnavailable(func() error {
				_, err := s.Acquire(ctx(t), key+"/"+string(rune('a'+i)), req)
				return err
			})
			switch {
			case err == nil:
				won.Add(1)
			case assert.ErrorIs(t, err, lockstore.ErrUserQuota):
				over.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(max), won.Load(), "exactly the cap is granted")
	assert.Equal(t, int64(n-max), over.Load())
}

func testQuotaOtherUsers(t *testing.T, a, b lockstore.Store, key, user string) {
	fill(t, a, b, key, user, 2, 2, 10*time.Second)
	_, err := take(ctx(t), b, key+"/other", user+"-2", 2, time.Second)
	require.NoError(t, err, "another user has its own count")
	_, err = a.Acquire(ctx(t), key+"/free", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
	require.NoError(t, err, "an acquire without a quota is not counted")
	_, err = take(ctx(t), a, key+"/over", user, 2, time.Second)
	requireOverQuota(t, err, 2)
}

func testQuotaRenewal(t *testing.T, a, b lockstore.Store, key, user string) {
	ls := fill(t, a, b, key, user, 2, 2, 10*time.Second)
	for _, s := range []lockstore.Store{a, b} {
		again, err := s.Acquire(ctx(t), ls[0].Key, lockstore.AcquireRequest{
			Token: ls[0].Token, TTL: 20 * time.Second, Quota: lockstore.Quota{User: user, Max: 2},
		})
		require.NoError(t, err, "a same-token retry at the cap is a renewal, not a new lock")
		assert.True(t, again.Renewed)
	}
	_, err := take(ctx(t), a, key+"/over", user, 2, time.Second)
	capErr := requireOverQuota(t, err, 2)
	assert.Greater(t, capErr.Next, 9*time.Second)
	assert.LessOrEqual(t, capErr.Next, 10*time.Second, "the earliest is the lock not renewed")
}

func testQuotaRelease(t *testing.T, a, b lockstore.Store, key, user string) {
	ls := fill(t, a, b, key, user, 2, 2, 10*time.Second)
	require.NoError(t, b.Release(ctx(t), ls[0].Key, ls[0].Token))
	_, err := take(ctx(t), a, key+"/next", user, 2, time.Second)
	require.NoError(t, err, "a release frees a place at once")
	_, err = take(ctx(t), b, key+"/over", user, 2, time.Second)
	requireOverQuota(t, err, 2)
}

func testQuotaExpiry(t *testing.T, a, b lockstore.Store, key, user string) {
	// On a loaded machine the short lock can run out before the refusal
	// that needs it live is asked: the take is then granted, rightly if its
	// answer came after the short lock's end. Then again, for a fresh user
	// with a short lock twice as long.
	for ttl := 100 * time.Millisecond; ; ttl *= 2 {
		short, err := take(ctx(t), a, key+"/short", user, 2, ttl)
		require.NoError(t, err)
		_, err = take(ctx(t), b, key+"/long", user, 2, 10*time.Second)
		require.NoError(t, err)
		_, err = take(ctx(t), b, key+"/over", user, 2, time.Second)
		if err == nil && time.Now().After(short.ExpiresAt) && ttl < 5*time.Second {
			t.Logf("the take past the quota was answered after the %v lock ended: again with %v", ttl, 2*ttl)
			key, user = key+"+", user+"+"
			continue
		}
		capErr := requireOverQuota(t, err, 2)
		assert.LessOrEqual(t, capErr.Next, ttl, "the earliest lock is the short one")

		// short.ExpiresAt is conservative (the clock read before the grant
		// went out): the backend let it go up to a round trip later, and a
		// loaded machine's round trip outlasted a fixed 50 ms margin. So a
		// refusal now must name a lock still live (the short one, ending
		// within its round trip, or in its last millisecond: 0 ms left),
		// and a take once that has passed succeeds.
		time.Sleep(time.Until(short.ExpiresAt.Add(50 * time.Millisecond)))
		for range 3 {
			_, err = take(ctx(t), b, key+"/next", user, 2, time.Second)
			if !errors.Is(err, lockstore.ErrUserQuota) {
				break
			}
			capErr := requireOverQuota(t, err, 2)
			require.GreaterOrEqual(t, capErr.Next, time.Duration(0), "refused for a lock that has expired: %v", err)
			require.Less(t, capErr.Next, ttl, "refused for a lock other than the short one: %v", err)
			time.Sleep(capErr.Next + 10*time.Millisecond)
		}
		require.NoError(t, err, "an expired lock frees its place without anyone calling")
		return
	}
}

func testQuotaExtend(t *testing.T, a, b lockstore.Store, key, user string) {
	// A first TTL of a second, not less: under the race detector on a
	// loaded machine the extend came more than 200 ms after the grant.
	l, err := take(ctx(t), a, key+"/x", user, 1, time.Second)
	require.NoError(t, err)
	_, err = b.Extend(lockstore.WithUser(ctx(t), user), l.Key, l.Token, 10*time.Second)
	require.NoError(t, err)
	time.Sleep(time.Second + 100*time.Millisecond) // past the first TTL
	_, err = take(ctx(t), b, key+"/over", user, 1, time.Second)
	capErr := requireOverQuota(t, err, 1)
	assert.Greater(t, capErr.Next, 8*time.Second, "the count follows the extended expiry (10 s from the extend, not the first TTL)")

	// An extend asking for less time than is left does not shorten the
	// lease (docs/safety.md, "Late writes on redis", rule V1), and the
	// count keeps following the lease; a release frees the place.
	_, err = a.Extend(ctx(t), l.Key, l.Token, 50*time.Millisecond)
	require.NoError(t, err)
	time.Sleep(150 * time.Millisecond)
	_, err = take(ctx(t), a, key+"/next", user, 1, time.Second)
	capErr = requireOverQuota(t, err, 1)
	assert.Greater(t, capErr.Next, 8*time.Second, "the lease kept its later expiry")
	require.NoError(t, a.Release(ctx(t), l.Key, l.Token))
	_, err = take(ctx(t), a, key+"/next", user, 1, time.Second)
	require.NoError(t, err)
}

// testQuotaOtherIdentity: a lock counts against the user it was granted
// to, whoever renews, extends or releases it, and whatever they say they
// are (a hint that is wrong, missing or another user's).
func testQuotaOtherIdentity(t *testing.T, a, b lockstore.Store, key, user string) {
	other := user + "-other"
	ls := fill(t, a, b, key, user, 2, 2, 10*time.Second)

	renewed, err := b.Acquire(ctx(t), ls[0].Key, lockstore.AcquireRequest{
		Token: ls[0].Token, TTL: 20 * time.Second, Quota: lockstore.Quota{User: other, Max: 1},
	})
	require.NoError(t, err, "a renewal through another identity")
	assert.True(t, renewed.Renewed)
	_, err = take(ctx(t), a, key+"/o", other, 1, 10*time.Second)
	require.NoError(t, err, "the renewal did not count against the other user")

	_, err = a.Extend(lockstore.WithUser(ctx(t), other), ls[1].Key, ls[1].Token, 30*time.Second)
	require.NoError(t, err, "an extend with a wrong hint")
	_, err = take(ctx(t), b, key+"/over", user, 2, time.Second)
	capErr := requireOverQuota(t, err, 2)
	assert.Greater(t, capErr.Next, 19*time.Second, "both of the user's locks moved: the renewed one is the earliest")

	require.NoError(t, b.Release(lockstore.WithUser(ctx(t), other), ls[0].Key, ls[0].Token), "a release with a wrong hint")
	require.NoError(t, a.Release(ctx(t), ls[1].Key, ls[1].Token), "a release without a hint")
	fill(t, a, b, key+"/again", user, 2, 2, time.Second)
}

func testQuotaHeld(t *testing.T, a, b lockstore.Store, key, user string) {
	_, err := b.Acquire(ctx(t), key+"/held", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 10 * time.Second})
	require.NoError(t, err)
	fill(t, a, b, key, user, 1, 1, 10*time.Second)
	_, err = take(ctx(t), a, key+"/held", user, 1, time.Second)
	require.ErrorIs(t, err, lockstore.ErrHeld, "a key someone else holds is held, whatever the caller's count")
}

func testQuotaWaiter(t *testing.T, a, b lockstore.Store, key, user string) {
	holder, err := b.Acquire(ctx(t), key+"/held", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 10 * time.Second})
	require.NoError(t, err)
	fill(t, a, b, key, user, 1, 1, 10*time.Second)
	// The release is awaited before the test ends: its delete can wake the
	// waiter before its own reply is read, and the stores close with the
	// test (a loaded run saw "use of closed network connection").
	released := make(chan struct{})
	defer func() { <-released }()
	go func() {
		defer close(released)
		time.Sleep(100 * time.Millisecond)
		assert.NoError(t, b.Release(ctx(t), holder.Key, holder.Token))
	}()
	start := time.Now()
	_, err = a.Acquire(ctx(t), key+"/held", lockstore.AcquireRequest{
		Token: lockstore.NewToken(), TTL: time.Second, Wait: 3 * time.Second, Quota: lockstore.Quota{User: user, Max: 1},
	})
	requireOverQuota(t, err, 1)
	assert.Less(t, time.Since(start), 2*time.Second, "the wait ends when the key could be granted")
	_, err = b.Acquire(ctx(t), key+"/held", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
	require.NoError(t, err, "the refused waiter left the queue")
}

func testQuotaInvalid(t *testing.T, a, _ lockstore.Store, key, _ string) {
	_, err := take(ctx(t), a, key, "", 1, time.Second)
	require.ErrorIs(t, err, lockstore.ErrInvalid, "a cap without a user")
	_, err = take(ctx(t), a, key, "u", -1, time.Second)
	require.ErrorIs(t, err, lockstore.ErrInvalid, "a negative cap")
}
