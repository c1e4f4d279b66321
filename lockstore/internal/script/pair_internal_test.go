package script

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The two sides of a pair go out in one write, the lead's call first,
// whichever comes first; a side whose partner never comes, or cancelled,
// goes alone; and only a grant's or a delete's call pairs.
func TestPair(t *testing.T) {
	srv := redistest.Start(t)
	b := NewBatch(srv.Client(), time.Second)
	ctx := context.Background()
	release := ReleaseScript.Hash()
	// Calls the server refuses (NOSCRIPT, or the script's own argument
	// check) are enough: what is counted is what was written.
	call := func(ctx context.Context) { _ = b.EvalSha(ctx, release, []string{"k"}, "x").Err() }
	sent := func(op func()) (writes, calls int64) {
		w, c := b.Writes.Load(), b.Calls.Load()
		op()
		return b.Writes.Load() - w, b.Calls.Load() - c
	}

	// The second side comes 100 µs after the first, which waits 2 ms for
	// it: a loaded machine's scheduler can take longer than that to run it,
	// and then the first rightly goes alone. What is tested here is the
	// pairing, so the first waits as long as it takes.
	pairWait = time.Minute
	for _, leadFirst := range []bool{true, false} {
		p := &Pair{}
		writes, calls := sent(func() {
			var wg sync.WaitGroup
			first, second := WithPair(ctx, p, leadFirst), WithPair(ctx, p, !leadFirst)
			wg.Go(func() { call(first) })
			time.Sleep(100 * time.Microsecond)
			wg.Go(func() { call(second) })
			wg.Wait()
		})
		assert.Equal(t, int64(1), writes, "lead first %v: one write", leadFirst)
		assert.Equal(t, int64(2), calls, "lead first %v: two calls", leadFirst)
	}

	pairWait = 2 * time.Millisecond
	p := &Pair{}
	writes, calls := sent(func() { call(WithPair(ctx, p, true)) })
	assert.Equal(t, [2]int64{1, 1}, [2]int64{writes, calls}, "nobody came: alone")
	writes, calls = sent(func() { call(WithPair(ctx, p, false)) })
	assert.Equal(t, [2]int64{1, 1}, [2]int64{writes, calls}, "too late: alone")

	pairWait = time.Minute // only Cancel can end the lead's wait in time
	p = &Pair{}
	done := make(chan struct{})
	go func() {
		call(WithPair(ctx, p, true))
		close(done)
	}()
	time.Sleep(100 * time.Microsecond)
	p.Cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		require.Fail(t, "a cancelled pair's lead never went")
	}
	pairWait = 2 * time.Millisecond

	p = &Pair{}
	writes, calls = sent(func() {
		// Not a grant or a delete: not paired, not waiting.
		_ = b.EvalSha(WithPair(ctx, p, true), InspectScript.Hash(), []string{"k"}).Err()
	})
	assert.Equal(t, [2]int64{1, 1}, [2]int64{writes, calls})
	p.mu.Lock()
	assert.Nil(t, p.waiting, "an inspect does not wait for a partner")
	p.mu.Unlock()
}
