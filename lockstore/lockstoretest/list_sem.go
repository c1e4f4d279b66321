package lockstoretest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/lockstore"
)

// RunSemList runs the listing suite for semaphores (lockstore.SemLister);
// queued as in RunList.
func RunSemList(t *testing.T, newStore func(t *testing.T) lockstore.Semaphores, queued bool) {
	t.Run("PagesReturnEverySemaphoreOnceInOrder", func(t *testing.T) {
		t.Parallel()
		s, prefix := newStore(t), key(t)+"/"
		keys := make([]string, 300)
		for i := range keys {
			keys[i] = fmt.Sprintf("%ss%04d", prefix, i)
		}
		order := rand.Perm(len(keys))
		for _, i := range order {
			for range 1 + i%2 { // one or two permits of two
				_, err := s.SemAcquire(ctx(t), keys[i], lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Minute, Limit: 2, Owner: "o"})
				require.NoError(t, err)
			}
		}
		_, err := s.SemAcquire(ctx(t), prefix[:len(prefix)-1]+"x", lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Minute, Limit: 1})
		require.NoError(t, err)
		var got []string
		q := lockstore.ListQuery{Prefix: prefix, Limit: 70}
		for {
			p, err := semLister(t, s).ListSemaphores(ctx(t), q)
			require.NoError(t, err)
			require.LessOrEqual(t, len(p.Items), q.Limit)
			for _, it := range p.Items {
				got = append(got, it.Key)
				i := len(got) - 1
				assert.Equal(t, 2, it.Limit)
				if assert.Len(t, it.Holders, 1+i%2, it.Key) {
					assert.Empty(t, it.Holders[0].Token, "never a token")
					assert.Positive(t, it.Holders[0].Left)
				}
			}
			if p.Next == "" {
				break
			}
			q.After = p.Next
		}
		assert.Equal(t, keys, got)
	})
	t.Run("EndedAndWaiters", func(t *testing.T) {
		t.Parallel()
		s, prefix := newStore(t), key(t)+"/"
		tok := lockstore.NewToken()
		_, err := s.SemAcquire(ctx(t), prefix+"released", lockstore.PermitRequest{Token: tok, TTL: time.Minute, Limit: 1})
		require.NoError(t, err)
		require.NoError(t, s.SemRelease(ctx(t), prefix+"released", tok))
		_, err = s.SemAcquire(ctx(t), prefix+"full", lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Minute, Limit: 1})
		require.NoError(t, err)
		c, cancel := context.WithCancel(ctx(t))
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = s.SemAcquire(c, prefix+"full", lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Second, Limit: 1, Wait: 5 * time.Second})
		}()
		defer func() { cancel(); <-done }()
		want := 0
		if queued {
			want = 1
		}
		require.Eventually(t, func() bool {
			p, err := semLister(t, s).ListSemaphores(ctx(t), lockstore.ListQuery{Prefix: prefix, Limit: 10})
			require.NoError(t, err)
			return len(p.Items) == 1 && p.Items[0].Key == prefix+"full" && p.Items[0].Waiters == want
		}, 2*time.Second, 20*time.Millisecond, "one semaphore, with %d waiter(s)", want)
	})
}

func semLister(t *testing.T, s lockstore.Semaphores) lockstore.SemLister {
	l, ok := s.(lockstore.SemLister)
	require.True(t, ok, "%T does not list semaphores", s)
	return l
}
