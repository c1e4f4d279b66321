package lockstore

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/redistest"
)

// beforeScript runs hook before the first call of one script (by its
// SHA) that goes through it, and counts the calls: a forced release's
// delete, staged to land after a write that came between its read and it.
type beforeScript struct {
	redis.Scripter
	sha   string
	hook  func()
	calls *atomic.Int64
}

func (b beforeScript) before(sha string) {
	if sha == b.sha && b.calls.Add(1) == 1 {
		b.hook()
	}
}

func (b beforeScript) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	b.before(sha)
	return b.Scripter.EvalSha(ctx, sha, keys, args...)
}

func (b beforeScript) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return b.Scripter.Eval(ctx, script, keys, args...) // after a NOSCRIPT: EvalSha counted it
}

// TestForceReleaseDeletesOnlyAsRead: a forced release deletes only the
// lease it read, as a release does (rule V2), with the holder's digest
// from the read in place of a caller's.
func TestForceReleaseDeletesOnlyAsRead(t *testing.T) {
	srv := redistest.Start(t)
	holder := openInternal(t, srv)
	ctx := context.Background()

	forcing := func(t *testing.T, sha string, hook func()) (*Redis, *atomic.Int64) {
		admin := openInternal(t, srv)
		calls := new(atomic.Int64)
		admin.scripts = beforeScript{Scripter: admin.scripts, sha: sha, hook: hook, calls: calls}
		return admin, calls
	}

	t.Run("a late delete after a renewal", func(t *testing.T) {
		key, token := "force/late", NewToken()
		_, err := holder.Acquire(ctx, key, AcquireRequest{Token: token, TTL: time.Minute})
		require.NoError(t, err)
		read, _, err := nodeInspect(ctx, holder.scripts, key)
		require.NoError(t, err)
		_, err = holder.Acquire(ctx, key, AcquireRequest{Token: token, TTL: time.Minute})
		require.NoError(t, err)
		require.ErrorIs(t, nodeRelease(ctx, srv.Client(), key, read.digest, read, false), errMoved)
		_, err = holder.Inspect(ctx, key)
		require.NoError(t, err, "the renewed lease stays")
	})

	t.Run("the holder renewed between read and delete", func(t *testing.T) {
		key, token := "force/renewed", NewToken()
		l, err := holder.Acquire(ctx, key, AcquireRequest{Token: token, TTL: time.Minute})
		require.NoError(t, err)
		admin, calls := forcing(t, releaseScript.Hash(), func() {
			_, err := holder.Extend(ctx, key, token, 2*time.Minute)
			require.NoError(t, err)
		})
		got, err := admin.ForceRelease(ctx, key, 0)
		require.NoError(t, err)
		assert.Equal(t, l.Fence, got.Fence)
		assert.EqualValues(t, 2, calls.Load(), "the first delete found the lease changed and deleted nothing; the holder's lease, read again, went")
		_, err = holder.Inspect(ctx, key)
		require.ErrorIs(t, err, ErrNotHeld)
	})

	t.Run("another holder took the key between read and delete", func(t *testing.T) {
		key, token := "force/taken", NewToken()
		_, err := holder.Acquire(ctx, key, AcquireRequest{Token: token, TTL: time.Minute})
		require.NoError(t, err)
		var next Lease
		admin, calls := forcing(t, releaseScript.Hash(), func() {
			require.NoError(t, holder.Release(ctx, key, token))
			next, err = holder.Acquire(ctx, key, AcquireRequest{Token: NewToken(), TTL: time.Minute})
			require.NoError(t, err)
		})
		_, err = admin.ForceRelease(ctx, key, 0)
		require.ErrorIs(t, err, ErrNotHeld, "the lease it read is gone")
		assert.EqualValues(t, 1, calls.Load())
		l, err := holder.Inspect(ctx, key)
		require.NoError(t, err, "the new holder's lease stays")
		assert.Equal(t, next.Fence, l.Fence)
	})

	t.Run("a permit renewed between read and delete", func(t *testing.T) {
		key, token := "force/permit", NewToken()
		p, err := holder.SemAcquire(ctx, key, PermitRequest{Token: token, Limit: 2, TTL: time.Minute})
		require.NoError(t, err)
		admin, calls := forcing(t, semReleaseScript.Hash(), func() {
			_, err := holder.SemExtend(ctx, key, token, 2*time.Minute)
			require.NoError(t, err)
		})
		got, err := admin.SemForceRelease(ctx, key, p.Fence)
		require.NoError(t, err)
		assert.Equal(t, p.Fence, got.Fence)
		assert.EqualValues(t, 2, calls.Load(), "the first delete found the permit changed")
		_, err = holder.SemInspect(ctx, key)
		require.ErrorIs(t, err, ErrNotHeld)
	})
}

// TestRedlockForceDeletesOnlyAsRead stages a forced release's deletes on
// Redlock's nodes with the holder's digest and values as read: after a
// renewal, each single delete finds the lease changed; after another
// holder took the key, the delete step (with its reads again) leaves the
// new lease on every node.
func TestRedlockForceDeletesOnlyAsRead(t *testing.T) {
	s, srvs := threeNodes(t)
	ctx := context.Background()
	readAll := func(t *testing.T, key string) []lockValue {
		reads := make([]lockValue, len(srvs))
		for i, srv := range srvs {
			var err error
			reads[i], _, err = nodeInspect(ctx, srv.Client(), key)
			require.NoError(t, err)
		}
		return reads
	}

	t.Run("renewed", func(t *testing.T) {
		key, token := "force/late", NewToken()
		_, err := s.Acquire(ctx, key, AcquireRequest{Token: token, TTL: time.Minute})
		require.NoError(t, err)
		reads := readAll(t, key)
		_, err = s.Acquire(ctx, key, AcquireRequest{Token: token, TTL: time.Minute})
		require.NoError(t, err)
		for i, srv := range srvs {
			require.ErrorIs(t, nodeRelease(ctx, srv.Client(), key, reads[i].digest, reads[i], false), errMoved, "node %d", i)
		}
		_, err = s.Inspect(ctx, key)
		require.NoError(t, err, "the renewed lease stays")
	})

	t.Run("taken", func(t *testing.T) {
		key, token := "force/taken", NewToken()
		_, err := s.Acquire(ctx, key, AcquireRequest{Token: token, TTL: time.Minute})
		require.NoError(t, err)
		reads := readAll(t, key)
		require.NoError(t, s.Release(ctx, key, token))
		next, err := s.Acquire(ctx, key, AcquireRequest{Token: NewToken(), TTL: time.Minute})
		require.NoError(t, err)
		for i, srv := range srvs {
			require.ErrorIs(t, releaseRead(ctx, srv.Client(), key, reads[i].digest, reads[i], true, true), ErrTokenMismatch, "node %d", i)
		}
		l, err := s.Inspect(ctx, key)
		require.NoError(t, err, "the new holder's lease stays")
		assert.Equal(t, next.Fence, l.Fence)
		got, err := s.ForceRelease(ctx, key, reads[0].fence)
		require.ErrorIs(t, err, ErrNotHeld, "the fence read names a lease that is gone: got %+v", got)
	})
}
