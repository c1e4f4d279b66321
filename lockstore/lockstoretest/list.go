package lockstoretest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/lockstore"
)

// RunList runs the listing suite (lockstore.Lister) against the stores
// newStore returns; queued says whether the store keeps a wait queue that
// Listed.Waiters counts (Memory, Redis; not Redlock).
func RunList(t *testing.T, newStore func(t *testing.T) lockstore.Store, queued bool) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s lockstore.Store, prefix string)
	}{
		{"PagesReturnEveryKeyOnceInOrder", testListPages},
		{"PrefixMatchesOnlyItsKeys", testListPrefix},
		{"EndedLocksAreNotListed", testListEnded},
		{"InvalidQueries", testListInvalid},
		{"Waiters", func(t *testing.T, s lockstore.Store, prefix string) { testListWaiters(t, s, prefix, queued) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t), key(t)+"/")
		})
	}
}

func lister(t *testing.T, s lockstore.Store) lockstore.Lister {
	l, ok := s.(lockstore.Lister)
	require.True(t, ok, "%T does not list", s)
	return l
}

// listAll pages through prefix with limit, checking each page's bounds,
// and returns every item in the order the pages gave them.
func listAll(t *testing.T, s lockstore.Store, prefix string, limit int) []lockstore.Listed {
	t.Helper()
	var all []lockstore.Listed
	q := lockstore.ListQuery{Prefix: prefix, Limit: limit}
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10000, "the listing does not end")
		p, err := lister(t, s).List(ctx(t), q)
		require.NoError(t, err)
		require.LessOrEqual(t, len(p.Items), limit)
		all = append(all, p.Items...)
		if p.Next == "" {
			return all
		}
		require.Greater(t, p.Next, q.After, "the cursor moves forward")
		q.After = p.Next
	}
}

// takeAll acquires every key, 16 at a time, with a minute's lease, and
// returns the fence each got.
func takeAll(t *testing.T, s lockstore.Store, keys []string) map[string]int64 {
	t.Helper()
	var mu sync.Mutex
	fences := make(map[string]int64, len(keys))
	work := make(chan string)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for k := range work {
				c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				l, err := s.Acquire(c, k, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute, Owner: "owner-" + k})
				cancel()
				if !assert.NoError(t, err, k) {
					continue
				}
				mu.Lock()
				fences[k] = l.Fence
				mu.Unlock()
			}
		})
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	require.Len(t, fences, len(keys))
	return fences
}

// 2 500 locks, taken in random order, come back once each, in key order,
// with their owner and fence and never a token, over pages of 100 and of
// 1 000; keys just outside the prefix do not.
func testListPages(t *testing.T, s lockstore.Store, prefix string) {
	keys := make([]string, 2500)
	for i := range keys {
		keys[i] = fmt.Sprintf("%sk%05d", prefix, i)
	}
	shuffled := append([]string(nil), keys...)
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	outside := []string{prefix[:len(prefix)-1], prefix[:len(prefix)-1] + "x/k00001"}
	fences := takeAll(t, s, append(shuffled, outside...))
	for _, limit := range []int{100, 1000} {
		items := listAll(t, s, prefix, limit)
		got := make([]string, len(items))
		for i, it := range items {
			got[i] = it.Key
			assert.Equal(t, "owner-"+it.Key, it.Owner)
			assert.Equal(t, fences[it.Key], it.Fence, it.Key)
			assert.Empty(t, it.Token, "a listing never shows a token")
			assert.Positive(t, it.Left)
			assert.LessOrEqual(t, it.Left, time.Minute)
			assert.Equal(t, time.Minute, it.Granted)
		}
		require.Equal(t, keys, got, "pages of %d: every key once, in order", limit)
	}
}

func testListPrefix(t *testing.T, s lockstore.Store, prefix string) {
	takeAll(t, s, []string{prefix + "p/a", prefix + "p/ab", prefix + "p/a/b", prefix + "pa", prefix + "q"})
	keysOf := func(p string) []string {
		var ks []string
		for _, it := range listAll(t, s, p, 2) {
			ks = append(ks, it.Key)
		}
		return ks
	}
	assert.Equal(t, []string{prefix + "p/a", prefix + "p/a/b", prefix + "p/ab"}, keysOf(prefix+"p/a"))
	assert.Equal(t, []string{prefix + "p/a/b"}, keysOf(prefix+"p/a/"))
	assert.Equal(t, []string{prefix + "p/a", prefix + "p/a/b", prefix + "p/ab", prefix + "pa"}, keysOf(prefix+"p"))
	assert.Empty(t, keysOf(prefix+"r"))
}

func testListEnded(t *testing.T, s lockstore.Store, prefix string) {
	token := lockstore.NewToken()
	_, err := s.Acquire(ctx(t), prefix+"released", lockstore.AcquireRequest{Token: token, TTL: time.Minute})
	require.NoError(t, err)
	// A lease that ends by itself: short, but long enough for Redlock to
	// vouch for it on a busy machine (a grant it cannot confirm within the
	// validity answers unavailable, and is retried here as a client would).
	const short = 300 * time.Millisecond
	expiring := lockstore.NewToken()
	_, err = s.Acquire(ctx(t), prefix+"expires", lockstore.AcquireRequest{Token: expiring, TTL: short})
	for i := 0; i < 5 && errors.Is(err, lockstore.ErrUnavailable); i++ {
		_, err = s.Acquire(ctx(t), prefix+"expires", lockstore.AcquireRequest{Token: expiring, TTL: short})
	}
	require.NoError(t, err)
	// A store lets the lease go TTL after its last write, which came
	// before the answer (on Redlock the confirmation, after the votes).
	start := time.Now()
	takeAll(t, s, []string{prefix + "stays"})
	require.NoError(t, s.Release(ctx(t), prefix+"released", token))
	// Past the lease's end on every node: its TTL from the round's start,
	// plus the clock drift allowance.
	time.Sleep(time.Until(start.Add(short + short/50 + 10*time.Millisecond)))
	items := listAll(t, s, prefix, 10)
	require.Len(t, items, 1)
	assert.Equal(t, prefix+"stays", items[0].Key)
}

func testListInvalid(t *testing.T, s lockstore.Store, prefix string) {
	for _, q := range []lockstore.ListQuery{
		{Prefix: prefix, Limit: 0},
		{Prefix: prefix, Limit: lockstore.MaxListLimit + 1},
		{Prefix: prefix, After: "elsewhere", Limit: 10},
	} {
		_, err := lister(t, s).List(ctx(t), q)
		assert.ErrorIs(t, err, lockstore.ErrInvalid, "%+v", q)
	}
}

// A caller waiting for a held key is counted where the store queues.
func testListWaiters(t *testing.T, s lockstore.Store, prefix string, queued bool) {
	k := prefix + "waited"
	takeAll(t, s, []string{k})
	c, cancel := context.WithCancel(ctx(t))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Acquire(c, k, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second, Wait: 5 * time.Second})
	}()
	defer func() { cancel(); <-done }()
	want := 0
	if queued {
		want = 1
	}
	require.Eventually(t, func() bool {
		items := listAll(t, s, prefix, 10)
		return len(items) == 1 && items[0].Waiters == want
	}, 2*time.Second, 20*time.Millisecond, "want one lock with %d waiter(s)", want)
}
