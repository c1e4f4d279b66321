package metrics_test

import (
	"context"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/memory"
	"github.com/lockgateway/lockgateway/metrics"
)

// TestSemaphoresCounted: each way a permit operation ends is its own
// series, on a real Memory store, and no series names a key or a token.
func TestSemaphoresCounted(t *testing.T) {
	m := metrics.New()
	s := m.Semaphores(memory.New())
	ctx := context.Background()
	req := func(token string, limit int) lockstore.PermitRequest {
		return lockstore.PermitRequest{Token: token, TTL: time.Minute, Limit: limit}
	}
	a, b := lockstore.NewToken(), lockstore.NewToken()
	_, err := s.SemAcquire(ctx, "secret/key", req(a, 1))
	require.NoError(t, err)
	_, err = s.SemAcquire(ctx, "secret/key", req(a, 1))
	require.NoError(t, err)
	_, err = s.SemAcquire(ctx, "secret/key", req(b, 1))
	require.ErrorIs(t, err, lockstore.ErrSemaphoreFull)
	_, err = s.SemAcquire(ctx, "secret/key", req(b, 2))
	require.ErrorIs(t, err, lockstore.ErrLimitMismatch)
	_, err = s.SemExtend(ctx, "secret/key", a, 0)
	require.NoError(t, err)
	require.ErrorIs(t, s.SemRelease(ctx, "secret/key", b), lockstore.ErrTokenMismatch)
	require.NoError(t, s.SemRelease(ctx, "secret/key", a))
	require.ErrorIs(t, s.SemRelease(ctx, "secret/key", a), lockstore.ErrNotHeld)
	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.SemAcquire(gone, "secret/other", lockstore.PermitRequest{Token: b, TTL: time.Minute, Limit: 1, Wait: time.Second})
	require.Error(t, err)

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, series := range []string{
		`lockgw_permit_acquire_duration_seconds_count{outcome="acquired"} 1`,
		`lockgw_permit_acquire_duration_seconds_count{outcome="renewed"} 1`,
		`lockgw_permit_acquire_duration_seconds_count{outcome="full"} 1`,
		`lockgw_permit_acquire_duration_seconds_count{outcome="limit_mismatch"} 1`,
		`lockgw_permit_acquire_duration_seconds_count{outcome="abandoned"} 1`,
		`lockgw_permit_ops_total{op="extend",outcome="done"} 1`,
		`lockgw_permit_ops_total{op="release",outcome="done"} 1`,
		`lockgw_permit_ops_total{op="release",outcome="gone"} 1`,
		`lockgw_permit_ops_total{op="release",outcome="mismatch"} 1`,
	} {
		assert.Contains(t, text, series)
	}
	assert.NotContains(t, text, "secret")
	assert.NotContains(t, text, a)
}

// batchSems is a Memory whose semaphores say when a batch reached them.
type batchSems struct {
	*memory.Store
	batches int
}

func (b *batchSems) SemExtendBatch(ctx context.Context, exts []lockstore.Extension) []lockstore.SemExtended {
	b.batches++
	out := make([]lockstore.SemExtended, len(exts))
	for i, e := range exts {
		out[i].Permit, out[i].Err = b.SemExtend(ctx, e.Key, e.Token, e.TTL)
	}
	return out
}

// TestSemaphoresPassBatches: holds' batched renewals of permits reach the
// store as one batch through the metrics wrapper, each counted as an
// extend (without the method here, the renewer sent each alone).
func TestSemaphoresPassBatches(t *testing.T) {
	m := metrics.New()
	store := &batchSems{Store: memory.New()}
	s := m.Semaphores(store)
	ctx := context.Background()
	var exts []lockstore.Extension
	for _, key := range []string{"a", "b"} {
		p, err := s.SemAcquire(ctx, key, lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Minute, Limit: 1})
		require.NoError(t, err)
		exts = append(exts, lockstore.Extension{Key: key, Token: p.Token, TTL: time.Minute})
	}
	exts = append(exts, lockstore.Extension{Key: "c", Token: lockstore.NewToken(), TTL: time.Minute})
	out := lockstore.SemExtendAll(ctx, s, exts)
	assert.Equal(t, 1, store.batches, "one batch reached the store")
	require.Len(t, out, 3)
	assert.NoError(t, out[0].Err)
	assert.NoError(t, out[1].Err)
	assert.ErrorIs(t, out[2].Err, lockstore.ErrNotHeld)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	assert.Contains(t, string(body), `lockgw_permit_ops_total{op="extend",outcome="done"} 2`)
	assert.Contains(t, string(body), `lockgw_permit_ops_total{op="extend",outcome="gone"} 1`)
}
