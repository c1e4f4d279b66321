package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRedisSemExtendBatch: one pipeline extends many permits, each
// answered as SemExtend would: extended (never shortened), no permit held,
// or permits held but none the token's; and SemExtendAll answers the same
// through a store that does not batch (Memory).
func TestRedisSemExtendBatch(t *testing.T) {
	srv := redistest.Start(t)
	for name, s := range map[string]lockstore.Semaphores{"redis": backendtest.NewRedis(t, srv), "memory": memory.New()} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var exts []lockstore.Extension
			for i := range 30 {
				// 3 s: the thirty grants and the batch fit in it on a
				// loaded machine (1 s did not: a permit ended first).
				p, err := s.SemAcquire(ctx, "sembatch/"+string(rune('a'+i%3)), lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: 3 * time.Second, Limit: 10})
				require.NoError(t, err)
				exts = append(exts, lockstore.Extension{Key: p.Key, Token: p.Token, TTL: time.Minute})
			}
			_, err := s.SemAcquire(ctx, "sembatch/a", lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Minute, Limit: 10})
			require.ErrorIs(t, err, lockstore.ErrSemaphoreFull, "ten permits of a are held")
			exts = append(exts,
				lockstore.Extension{Key: "sembatch/free", Token: lockstore.NewToken(), TTL: time.Minute},
				lockstore.Extension{Key: "sembatch/b", Token: lockstore.NewToken(), TTL: time.Minute},
				lockstore.Extension{Key: exts[0].Key, Token: exts[0].Token, TTL: 20 * time.Millisecond}, // asks for less
			)
			out := lockstore.SemExtendAll(ctx, s, exts)
			require.Len(t, out, len(exts))
			for i := range 30 {
				require.NoError(t, out[i].Err, exts[i].Key)
				assert.Equal(t, time.Minute, out[i].Permit.Granted)
				assert.Equal(t, 10, out[i].Permit.Limit)
			}
			assert.ErrorIs(t, out[30].Err, lockstore.ErrNotHeld)
			assert.ErrorIs(t, out[31].Err, lockstore.ErrTokenMismatch)
			require.NoError(t, out[32].Err)
			time.Sleep(3200 * time.Millisecond) // past the permits' first TTL
			st, err := s.SemInspect(ctx, "sembatch/a")
			require.NoError(t, err)
			assert.Len(t, st.Holders, 10, "every permit extended, none shortened")
			for _, p := range st.Holders {
				assert.Greater(t, p.Left, 50*time.Second)
			}
		})
	}
}
