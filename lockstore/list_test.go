package lockstore_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/lockstoretest"
	"github.com/lockgateway/lockgateway/lockstore/memory"
	"github.com/lockgateway/lockgateway/lockstore/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRedisList(t *testing.T) {
	s := backendtest.NewRedis(t, redistest.Start(t))
	lockstoretest.RunList(t, func(t *testing.T) lockstore.Store { return s }, true)
}

func TestRedisClusterList(t *testing.T) {
	s := backendtest.NewCluster(t, redistest.StartCluster(t, 3))
	lockstoretest.RunList(t, func(t *testing.T) lockstore.Store { return s }, true)
}

func TestRedlockList(t *testing.T) {
	s := backendtest.OpenRedlock(t, backendtest.URLs(backendtest.StartNodes(t, 3)), redlock.Options{NodeTimeout: backendtest.Roomy})
	lockstoretest.RunList(t, func(t *testing.T) lockstore.Store { return s }, false)
}

// A Redlock listing shows what a majority holds: a lease on one node of
// three is not listed, one on two is, and so it stays with a node down.
func TestRedlockListMajority(t *testing.T) {
	srvs := backendtest.StartNodes(t, 3)
	s := backendtest.OpenRedlock(t, backendtest.URLs(srvs), redlock.Options{NodeTimeout: backendtest.Roomy})
	ctx := backendtest.Ctx(t)
	_, err := s.Acquire(ctx, "maj/held", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute, Owner: "w"})
	require.NoError(t, err)
	backendtest.Plant(t, srvs[0], "maj/minority", lockstore.NewToken(), time.Minute)
	two := lockstore.NewToken()
	backendtest.Plant(t, srvs[1], "maj/two", two, time.Minute)
	backendtest.Plant(t, srvs[2], "maj/two", two, time.Minute)
	split := []string{lockstore.NewToken(), lockstore.NewToken(), lockstore.NewToken()}
	for i, srv := range srvs { // three holders, none with a majority
		backendtest.Plant(t, srv, "maj/split", split[i], time.Minute)
	}

	list := func() []string {
		p, err := s.List(ctx, lockstore.ListQuery{Prefix: "maj/", Limit: 10})
		require.NoError(t, err)
		assert.Empty(t, p.Next)
		var keys []string
		for _, it := range p.Items {
			keys = append(keys, it.Key)
		}
		return keys
	}
	assert.Equal(t, []string{"maj/held", "maj/two"}, list())
	srvs[0].Kill()
	assert.Equal(t, []string{"maj/held", "maj/two"}, list(), "one node of three down")
	srvs[1].Kill()
	_, err = s.List(ctx, lockstore.ListQuery{Prefix: "maj/", Limit: 10})
	assert.ErrorIs(t, err, lockstore.ErrUnavailable, "two nodes of three down")
}

// A node full of keys that no majority holds cannot fill a page with them:
// the page ends where that node's keys stop being known, and the listing
// still returns every majority key.
func TestRedlockListMinorityKeysBeforeMajorityKeys(t *testing.T) {
	srvs := backendtest.StartNodes(t, 3)
	s := backendtest.OpenRedlock(t, backendtest.URLs(srvs), redlock.Options{NodeTimeout: backendtest.Roomy})
	ctx := backendtest.Ctx(t)
	for i := range 30 {
		backendtest.Plant(t, srvs[0], "mix/a"+string(rune('a'+i%26))+string(rune('a'+i/26)), lockstore.NewToken(), time.Minute)
	}
	_, err := s.Acquire(ctx, "mix/z", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)
	var got []string
	q := lockstore.ListQuery{Prefix: "mix/", Limit: 5}
	pages := 0
	for {
		p, err := s.List(ctx, q)
		require.NoError(t, err)
		pages++
		for _, it := range p.Items {
			got = append(got, it.Key)
		}
		if p.Next == "" {
			break
		}
		q.After = p.Next
	}
	assert.Equal(t, []string{"mix/z"}, got)
	assert.Greater(t, pages, 1, "the minority keys took pages of their own")
}

// BenchmarkList measures one page of 100 under a prefix holding 100 keys,
// with 100 000 other locks in the store: the cost docs/api.md quotes
// ("Listing locks"). Redis's locks are written straight into it.
func BenchmarkList(b *testing.B) {
	const others = 100_000
	q := lockstore.ListQuery{Prefix: "bench/", Limit: 100}
	b.Run("memory", func(b *testing.B) {
		s := memory.New()
		ctx := backendtest.Ctx(b)
		for i := range others + 100 {
			key := fmt.Sprintf("other/%d", i)
			if i < 100 {
				key = fmt.Sprintf("bench/%d", i)
			}
			_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Hour})
			require.NoError(b, err)
		}
		b.ResetTimer()
		for b.Loop() {
			p, err := s.List(ctx, q)
			require.NoError(b, err)
			require.Len(b, p.Items, 100)
		}
	})
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b)
		s := backendtest.NewRedis(b, srv)
		ctx := backendtest.Ctx(b)
		pipe := srv.Client().Pipeline()
		for i := range others + 100 {
			key := fmt.Sprintf("other/%d", i)
			if i < 100 {
				key = fmt.Sprintf("bench/%d", i)
			}
			pipe.Set(ctx, "lockgw:{"+key+"}:lock", backendtest.LockValue(lockstore.NewToken(), int64(i+1), "o"), time.Hour)
			pipe.Set(ctx, "lockgw:{"+key+"}:fence", i+1, time.Hour) // a lock leaves its counter too
		}
		_, err := pipe.Exec(ctx)
		require.NoError(b, err)
		b.ResetTimer()
		for b.Loop() {
			p, err := s.List(ctx, q)
			require.NoError(b, err)
			require.Len(b, p.Items, 100)
		}
		b.StopTimer()
		// How long Redis spends in one SCAN call: what a listing can
		// delay another client's command by.
		stats, err := srv.Client().Info(ctx, "commandstats").Result()
		require.NoError(b, err)
		for line := range strings.Lines(stats) {
			if strings.HasPrefix(line, "cmdstat_scan:") {
				b.Log(strings.TrimSpace(line))
			}
		}
	})
}

// Rate-limit windows kept among a store's leases (Memory; Redlock through
// LockWindows) are not locks anybody took: a listing of every key leaves
// them out.
func TestListLeavesOutRateLimitWindows(t *testing.T) {
	for name, s := range map[string]lockstore.Store{
		"memory":  memory.New(),
		"redlock": backendtest.OpenRedlock(t, backendtest.URLs(backendtest.StartNodes(t, 3)), redlock.Options{NodeTimeout: backendtest.Roomy}),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := backendtest.Ctx(t)
			windows, ok := s.(lockstore.Windows)
			if !ok {
				windows = lockstore.LockWindows(s)
			}
			left, err := windows.TakeWindow(ctx, "user-1", lockstore.NewToken(), time.Minute)
			require.NoError(t, err)
			require.Zero(t, left)
			_, err = s.Acquire(ctx, "a/lock", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
			require.NoError(t, err)
			p, err := s.(lockstore.Lister).List(ctx, lockstore.ListQuery{Limit: 10})
			require.NoError(t, err)
			require.Len(t, p.Items, 1)
			assert.Equal(t, "a/lock", p.Items[0].Key)
		})
	}
}

func TestRedisSemList(t *testing.T) {
	s := backendtest.NewRedis(t, redistest.Start(t))
	lockstoretest.RunSemList(t, func(t *testing.T) lockstore.Semaphores { return s }, true)
}

func TestRedisClusterSemList(t *testing.T) {
	s := backendtest.NewCluster(t, redistest.StartCluster(t, 3))
	lockstoretest.RunSemList(t, func(t *testing.T) lockstore.Semaphores { return s }, true)
}

func TestRedlockSemList(t *testing.T) {
	s := backendtest.OpenRedlock(t, backendtest.URLs(backendtest.StartNodes(t, 3)), redlock.Options{NodeTimeout: backendtest.Roomy})
	lockstoretest.RunSemList(t, func(t *testing.T) lockstore.Semaphores { return s }, false)
}
