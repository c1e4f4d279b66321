package lockstoretest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/lockstore"
)

// Forcing is what RunForce needs: a store with semaphores that releases
// leases and permits by force.
type Forcing interface {
	lockstore.Store
	lockstore.Semaphores
	lockstore.Forcer
}

// RunForce runs the forced-release part of the suite (lockstore.Forcer).
// Each call of newStore may return another instance on the same data (a
// gateway of its own): the holder and the administrator use two.
func RunForce(t *testing.T, newStore func(t *testing.T) Forcing) {
	tests := []struct {
		name string
		fn   func(t *testing.T, holder, admin Forcing, key string)
	}{
		{"FreesTheLease", testForce},
		{"NotHeld", testForceNotHeld},
		{"NamedFence", testForceNamedFence},
		{"WakesAWaiter", testForceWakesWaiter},
		{"Permit", testForcePermit},
		{"Invalid", testForceInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t), newStore(t), key(t))
		})
	}
}

func testForce(t *testing.T, holder, admin Forcing, key string) {
	token := lockstore.NewToken()
	l, err := holder.Acquire(ctx(t), key, lockstore.AcquireRequest{Token: token, TTL: time.Hour, Owner: "crashed-7"})
	require.NoError(t, err)

	got, err := admin.ForceRelease(ctx(t), key, 0)
	require.NoError(t, err)
	assert.Equal(t, key, got.Key)
	assert.Equal(t, l.Fence, got.Fence, "the lease released is the one held")
	assert.Equal(t, "crashed-7", got.Owner)
	assert.Empty(t, got.Token, "a forced release never learns the token")

	_, err = admin.Inspect(ctx(t), key)
	require.ErrorIs(t, err, lockstore.ErrNotHeld)
	_, err = holder.Extend(ctx(t), key, token, time.Hour)
	require.ErrorIs(t, err, lockstore.ErrNotHeld, "the old holder's extend finds nothing")
	require.ErrorIs(t, holder.Release(ctx(t), key, token), lockstore.ErrNotHeld, "nor does its release")

	next := acquire(t, admin, key, time.Minute)
	assert.Greater(t, next.Fence, l.Fence, "the fence rises for the next holder")
	_, err = admin.ForceRelease(ctx(t), key, 0)
	require.NoError(t, err)
	again, err := holder.Acquire(ctx(t), key, lockstore.AcquireRequest{Token: token, TTL: time.Minute})
	require.NoError(t, err)
	assert.False(t, again.Renewed, "the old token takes the key anew, not back")
	assert.Greater(t, again.Fence, next.Fence)
}

func testForceNotHeld(t *testing.T, holder, admin Forcing, key string) {
	_, err := admin.ForceRelease(ctx(t), key, 0)
	require.ErrorIs(t, err, lockstore.ErrNotHeld, "never taken")

	l := acquire(t, holder, key, time.Minute)
	require.NoError(t, holder.Release(ctx(t), key, l.Token))
	_, err = admin.ForceRelease(ctx(t), key, 0)
	require.ErrorIs(t, err, lockstore.ErrNotHeld, "released")

	acquire(t, holder, key, 200*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // its end, from the answer, and the drift
	_, err = admin.ForceRelease(ctx(t), key, 0)
	require.ErrorIs(t, err, lockstore.ErrNotHeld, "expired")
}

// testForceNamedFence: with a fence, only the lease of that fence goes;
// a page showing an older lease cannot free the one that replaced it.
func testForceNamedFence(t *testing.T, holder, admin Forcing, key string) {
	l := acquire(t, holder, key, time.Minute)
	_, err := admin.ForceRelease(ctx(t), key, l.Fence-1)
	require.ErrorIs(t, err, lockstore.ErrNotHeld)
	_, err = holder.Extend(ctx(t), key, l.Token, time.Minute)
	require.NoError(t, err, "another fence left the lease as it was")

	got, err := admin.ForceRelease(ctx(t), key, l.Fence)
	require.NoError(t, err)
	assert.Equal(t, l.Fence, got.Fence)
	_, err = admin.Inspect(ctx(t), key)
	require.ErrorIs(t, err, lockstore.ErrNotHeld)
}

func testForceWakesWaiter(t *testing.T, holder, admin Forcing, key string) {
	l := acquire(t, holder, key, time.Hour)
	done := make(chan error, 1)
	go func() {
		time.Sleep(200 * time.Millisecond)
		_, err := admin.ForceRelease(ctx(t), key, 0)
		done <- err
	}()
	start := time.Now()
	w, err := waitFor(t, admin, key, 5*time.Second)
	require.NoError(t, <-done)
	require.NoError(t, err, "the waiter gets the key the forced release freed")
	assert.Less(t, time.Since(start), time.Hour/2, "long before the old lease's end")
	assert.Greater(t, w.Fence, l.Fence)
}

func testForcePermit(t *testing.T, holder, admin Forcing, key string) {
	ta, tb := lockstore.NewToken(), lockstore.NewToken()
	a, err := holder.SemAcquire(ctx(t), key, lockstore.PermitRequest{Token: ta, TTL: time.Hour, Limit: 2, Owner: "crashed-a"})
	require.NoError(t, err)
	b, err := holder.SemAcquire(ctx(t), key, lockstore.PermitRequest{Token: tb, TTL: time.Hour, Limit: 2, Owner: "b"})
	require.NoError(t, err)
	require.NotEqual(t, a.Fence, b.Fence, "permits held at once never share a fence")

	_, err = admin.SemForceRelease(ctx(t), key, max(a.Fence, b.Fence)+1)
	require.ErrorIs(t, err, lockstore.ErrNotHeld, "no permit has that fence")

	got, err := admin.SemForceRelease(ctx(t), key, a.Fence)
	require.NoError(t, err)
	assert.Equal(t, a.Fence, got.Fence)
	assert.Equal(t, "crashed-a", got.Owner)
	assert.Equal(t, 2, got.Limit)
	assert.Empty(t, got.Token)

	st, err := admin.SemInspect(ctx(t), key)
	require.NoError(t, err)
	require.Len(t, st.Holders, 1, "the other permit stays")
	assert.Equal(t, b.Fence, st.Holders[0].Fence)
	_, err = holder.SemExtend(ctx(t), key, ta, time.Hour)
	require.ErrorIs(t, err, lockstore.ErrTokenMismatch, "a's permit is gone; b's is not a's")
	_, err = holder.SemExtend(ctx(t), key, tb, time.Hour)
	require.NoError(t, err)

	_, err = admin.SemForceRelease(ctx(t), key, a.Fence)
	require.ErrorIs(t, err, lockstore.ErrNotHeld, "released already")
	_, err = admin.SemForceRelease(ctx(t), key, b.Fence)
	require.NoError(t, err)
	require.ErrorIs(t, holder.SemRelease(ctx(t), key, tb), lockstore.ErrNotHeld, "the holder's release finds nothing")
	_, err = admin.SemInspect(ctx(t), key)
	require.ErrorIs(t, err, lockstore.ErrNotHeld)

	c, err := holder.SemAcquire(ctx(t), key, lockstore.PermitRequest{Token: ta, TTL: time.Minute, Limit: 2})
	require.NoError(t, err)
	assert.False(t, c.Renewed)
	assert.Greater(t, c.Fence, max(a.Fence, b.Fence), "the fence rises for the next holder")
}

func testForceInvalid(t *testing.T, _, admin Forcing, key string) {
	c := context.Background()
	_, err := admin.ForceRelease(c, "", 0)
	require.ErrorIs(t, err, lockstore.ErrInvalid)
	_, err = admin.ForceRelease(c, key, -1)
	require.ErrorIs(t, err, lockstore.ErrInvalid)
	_, err = admin.SemForceRelease(c, key, 0)
	require.ErrorIs(t, err, lockstore.ErrInvalid, "a permit is named by its fence")
	_, err = admin.SemForceRelease(c, "", 1)
	require.ErrorIs(t, err, lockstore.ErrInvalid)
}
