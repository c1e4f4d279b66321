package redis

import (
	"context"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/stretchr/testify/require"
)

// TestNotifierStaleSlotMap: a waiter subscribes while its gateway's slot
// map still names the old owner of a slot that moved. The old owner
// refuses the SSUBSCRIBE with MOVED, which go-redis drops without a word;
// no confirmation comes within confirmWait, and the notifier subscribes
// again on the owner the reloaded map names. (Through Acquire this is a
// narrow race: its first attempt usually meets the MOVED that reloads the
// map before it listens; here listen runs first.)
func TestNotifierStaleSlotMap(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	s, err := Open(c.URL(), Options{Mode: Cluster, Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	key := "stale/map"
	ch := script.Channel(key)
	_, err = s.Inspect(ctx, key) // the store has loaded the slot map
	require.ErrorIs(t, err, lockstore.ErrNotHeld)

	var src, dst *redistest.Server
	for _, m := range c.Masters {
		if m.Client().Exists(ctx, script.LockKey(key)).Err() == nil {
			src = m
		}
	}
	for _, m := range c.Masters {
		if m != src {
			dst = m
			break
		}
	}
	require.NotNil(t, src)
	require.NoError(t, c.MoveSlot(script.LockKey(key), dst)) // behind the store's back

	wake := make(chan struct{}, 1)
	start := time.Now()
	require.NoError(t, s.notifier.Listen(ctx, ch, "w1", wake))
	t.Logf("listen returned after %v", time.Since(start).Round(time.Millisecond))
	defer s.notifier.Stop(ch, "w1")
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := dst.Client().PubSubShardNumSub(ctx, ch).Result()
		require.NoError(t, err)
		if n[ch] == 1 {
			t.Logf("subscribed on the new owner %v after listen began", time.Since(start).Round(time.Millisecond))
			break
		}
		require.True(t, time.Now().Before(deadline), "no SSUBSCRIBE to %s on the new owner in 5s", ch)
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, dst.Client().SPublish(ctx, ch, "w1").Err())
	select {
	case <-wake:
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter was not woken by the notification on the new owner")
	}
}
