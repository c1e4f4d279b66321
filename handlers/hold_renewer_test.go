package handlers

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/memory"
)

// batchCounter is a memory store that counts the batches it is asked for.
type batchCounter struct {
	*memory.Store
	mu      sync.Mutex
	batches []int
}

func (b *batchCounter) ExtendBatch(ctx context.Context, exts []lockstore.Extension) []lockstore.Extended {
	b.mu.Lock()
	b.batches = append(b.batches, len(exts))
	b.mu.Unlock()
	return lockstore.ExtendAll(ctx, b.Store, exts)
}

// TestRenewerBatches: renewals due in one slot go to the store in one
// batch, each answered with its own outcome, never later than due.
func TestRenewerBatches(t *testing.T) {
	store := &batchCounter{Store: memory.New()}
	ctx := context.Background()
	var exts []lockstore.Extension
	for i := range 100 {
		l, err := store.Acquire(ctx, "k/"+string(rune('a'+i%26))+string(rune('a'+i/26)), lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
		require.NoError(t, err)
		exts = append(exts, lockstore.Extension{Key: l.Key, Token: l.Token, TTL: 2 * time.Minute})
	}
	exts = append(exts, lockstore.Extension{Key: "k/free", Token: lockstore.NewToken(), TTL: time.Minute})
	r := newRenewer(store, time.Second)
	due := time.Now().Add(2 * renewSlot)
	var chans []<-chan renewal
	for _, e := range exts {
		ch, _ := r.renew(due, e, nil)
		chans = append(chans, ch)
	}
	for i, ch := range chans {
		got := <-ch
		if i == len(exts)-1 {
			assert.ErrorIs(t, got.err, lockstore.ErrNotHeld)
			continue
		}
		require.NoError(t, got.err)
		assert.WithinDuration(t, time.Now().Add(2*time.Minute), got.expires, 5*time.Second)
	}
	assert.False(t, time.Now().Before(due.Add(-renewSlot)), "not sent before its slot")
	store.mu.Lock()
	defer store.mu.Unlock()
	assert.Equal(t, []int{101}, store.batches, "one batch for the slot")
}

// TestRenewerDropsCancelled: a renewal cancelled before its slot (its
// hold ended) is not sent, and its channel gets nothing; the others of its
// slot go out as before.
func TestRenewerDropsCancelled(t *testing.T) {
	store := &batchCounter{Store: memory.New()}
	ctx := context.Background()
	var exts []lockstore.Extension
	for _, key := range []string{"k/kept", "k/dropped"} {
		l, err := store.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
		require.NoError(t, err)
		exts = append(exts, lockstore.Extension{Key: l.Key, Token: l.Token, TTL: 2 * time.Minute})
	}
	r := newRenewer(store, time.Second)
	due := time.Now().Add(2 * renewSlot)
	kept, _ := r.renew(due, exts[0], nil)
	dropped, cancel := r.renew(due, exts[1], nil)
	cancel()
	require.NoError(t, (<-kept).err)
	select {
	case got := <-dropped:
		t.Fatalf("a cancelled renewal was sent: %+v", got)
	case <-time.After(2 * renewSlot):
	}
	l, err := store.Inspect(ctx, "k/dropped")
	require.NoError(t, err)
	assert.Less(t, l.Left, time.Minute, "its lease was not extended")
	store.mu.Lock()
	defer store.mu.Unlock()
	assert.Equal(t, []int{1}, store.batches, "the slot's batch without it")
}

// semBatchCounter is a memory store that counts the permit batches it is
// asked for.
type semBatchCounter struct {
	*memory.Store
	mu      sync.Mutex
	batches []int
}

func (b *semBatchCounter) SemExtendBatch(ctx context.Context, exts []lockstore.Extension) []lockstore.SemExtended {
	b.mu.Lock()
	b.batches = append(b.batches, len(exts))
	b.mu.Unlock()
	return lockstore.SemExtendAll(ctx, b.Store, exts)
}

// opCounter is an Observer counting permit extends and releases by
// outcome.
type opCounter struct {
	nopObserver
	mu  sync.Mutex
	ops map[string]int
}

func (c *opCounter) PermitOp(op, outcome string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ops[op+"/"+outcome]++
}

// TestPermitRenewerBatches: permits' renewals due in one slot go to the
// store in one batch too, each answered with its own outcome, and each
// heard as an extend (the permit metrics).
func TestPermitRenewerBatches(t *testing.T) {
	store := &semBatchCounter{Store: memory.New()}
	ctx := context.Background()
	var exts []lockstore.Extension
	for range 20 {
		p, err := store.SemAcquire(ctx, "s/a", lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Minute, Limit: 20})
		require.NoError(t, err)
		exts = append(exts, lockstore.Extension{Key: p.Key, Token: p.Token, TTL: 2 * time.Minute})
	}
	exts = append(exts, lockstore.Extension{Key: "s/a", Token: lockstore.NewToken(), TTL: time.Minute})
	obs := &opCounter{ops: map[string]int{}}
	r := newPermitRenewer(store, time.Second, obs)
	due := time.Now().Add(renewSlot)
	var chans []<-chan renewal
	for _, e := range exts {
		ch, _ := r.renew(due, e, nil)
		chans = append(chans, ch)
	}
	for i, ch := range chans {
		got := <-ch
		if i == len(exts)-1 {
			assert.ErrorIs(t, got.err, lockstore.ErrTokenMismatch, "permits held, none the token's")
			continue
		}
		require.NoError(t, got.err)
		assert.WithinDuration(t, time.Now().Add(2*time.Minute), got.expires, 5*time.Second)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	assert.Equal(t, []int{21}, store.batches, "one batch for the slot")
	obs.mu.Lock()
	defer obs.mu.Unlock()
	assert.Equal(t, map[string]int{"extend/done": 20, "extend/mismatch": 1}, obs.ops)
}
