package lockstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
)

// testSemHub: the hub reports permits granted, extended, released and
// expired, each soon after it happened.
func testSemHub(t *testing.T, store lockstore.Semaphores) {
	ctx := context.Background()
	hub := lockstore.NewSemHub(store, time.Second)
	w := hub.Watch("s")
	defer w.Close()
	next := func() lockstore.Update[lockstore.SemState] {
		t.Helper()
		for {
			select {
			case <-w.Ready():
				if u, ok := w.Latest(); ok {
					require.NoError(t, u.Err)
					return u
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no update")
			}
		}
	}
	u := next()
	require.False(t, u.State.Held())
	assert.Equal(t, "free", u.State.Tag())

	a, b := lockstore.NewToken(), lockstore.NewToken()
	at := time.Now()
	pa, err := store.SemAcquire(ctx, "s", lockstore.PermitRequest{Token: a, TTL: time.Minute, Limit: 2})
	require.NoError(t, err)
	u = next()
	require.Len(t, u.State.Sem.Holders, 1)
	assert.Equal(t, pa.Fence, u.State.Sem.Holders[0].Fence)
	assert.Less(t, time.Since(at), time.Second)
	tag1 := u.State.Tag()

	at = time.Now()
	_, err = store.SemAcquire(ctx, "s", lockstore.PermitRequest{Token: b, TTL: 300 * time.Millisecond, Limit: 2})
	require.NoError(t, err)
	u = next()
	require.Len(t, u.State.Sem.Holders, 2)
	assert.NotEqual(t, tag1, u.State.Tag())
	assert.Less(t, time.Since(at), time.Second)

	u = next() // b expires
	require.Len(t, u.State.Sem.Holders, 1, "expired")
	assert.Equal(t, tag1, u.State.Tag())

	at = time.Now()
	_, err = store.SemExtend(ctx, "s", a, 2*time.Minute)
	require.NoError(t, err)
	u = next()
	assert.Greater(t, time.Until(u.State.Sem.Holders[0].ExpiresAt), time.Minute)
	assert.Equal(t, tag1, u.State.Tag(), "an extend keeps the tag")
	assert.Less(t, time.Since(at), time.Second)

	at = time.Now()
	require.NoError(t, store.SemRelease(ctx, "s", a))
	u = next()
	assert.False(t, u.State.Held())
	assert.Less(t, time.Since(at), time.Second)
}

func TestSemHubMemory(t *testing.T) { testSemHub(t, lockstore.NewMemory()) }

func TestSemHubRedis(t *testing.T) { testSemHub(t, newRedisStore(t, redistest.Start(t))) }

func TestSemHubRedlock(t *testing.T) {
	testSemHub(t, openRedlock(t, urlsOf(startNodes(t, 3)), lockstore.RedlockOptions{NodeTimeout: 500 * time.Millisecond}))
}
