package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/lockgateway/lockgateway/lockstore/redlock"
)

// TestRedlockExtendBatch: one batch extends many leases on real nodes,
// each answered as Extend answers it (extended, never shortened, its
// recorded length reused with no TTL; not held; held by another; invalid),
// and each node's copy is lengthened. Two of the three nodes lost their
// scripts (SCRIPT FLUSH) just before: their pipelines are answered
// NOSCRIPT, and each refused extend goes again alone, through the path
// that loads the script. Without that, the batch would reach one node of
// three and extend nothing.
func TestRedlockExtendBatch(t *testing.T) {
	t.Parallel()
	srvs, s := batchNodes(t)
	ctx := backendtest.Ctx(t)

	exts := leasesToExtend(t, s, "batch", 40)
	reused := mustAcquire(t, s, "batch/reused", 20*time.Second)
	held := mustAcquire(t, s, "batch/held", time.Minute)
	exts = append(exts,
		lockstore.Extension{Key: reused.Key, Token: reused.Token}, // no TTL: the recorded 20 s
		lockstore.Extension{Key: "batch/free", Token: lockstore.NewToken(), TTL: time.Minute},
		lockstore.Extension{Key: held.Key, Token: lockstore.NewToken(), TTL: time.Minute},
		lockstore.Extension{Key: held.Key, Token: held.Token, TTL: time.Second}, // asks for less
		lockstore.Extension{Key: "batch/invalid", Token: "", TTL: time.Minute},
	)
	for _, srv := range srvs[:2] {
		require.NoError(t, srv.Client().ScriptFlush(ctx).Err())
	}
	evalsBefore := evalCalls(t, srvs[:2])

	before := time.Now()
	out := s.ExtendBatch(ctx, exts)
	after := time.Now()
	require.Len(t, out, len(exts))
	for i := range 40 {
		if assert.NoError(t, out[i].Err, exts[i].Key) {
			assert.Equal(t, time.Minute, out[i].Lease.Granted)
			assert.Equal(t, exts[i].Token, out[i].Lease.Token)
			// Validity counts from before the lease's pipelines went out.
			assert.False(t, out[i].Lease.ExpiresAt.Before(script.GrantEnd(before, time.Minute)), exts[i].Key)
			assert.False(t, out[i].Lease.ExpiresAt.After(script.GrantEnd(after, time.Minute)), exts[i].Key)
		}
		for n, srv := range srvs {
			left := srv.Client().PTTL(ctx, script.LockKey(exts[i].Key)).Val()
			assert.Greater(t, left, 50*time.Second, "%s lengthened on node %d", exts[i].Key, n)
		}
	}
	if assert.NoError(t, out[40].Err) {
		assert.Equal(t, 20*time.Second, out[40].Lease.Granted, "the recorded length")
	}
	assert.ErrorIs(t, out[41].Err, lockstore.ErrNotHeld)
	assert.ErrorIs(t, out[42].Err, lockstore.ErrTokenMismatch)
	if assert.NoError(t, out[43].Err) {
		assert.Equal(t, time.Second, out[43].Lease.Granted, "the holder is told what it asked for")
		got, err := s.Inspect(ctx, held.Key)
		require.NoError(t, err)
		assert.Greater(t, got.Left, 50*time.Second, "never shortened on the nodes")
	}
	assert.ErrorIs(t, out[44].Err, lockstore.ErrInvalid)
	// The NOSCRIPT refusals went again alone: EVAL, the script's source,
	// after EVALSHA's NOSCRIPT (go-redis's Script.Run).
	assert.Greater(t, evalCalls(t, srvs[:2]), evalsBefore, "refused extends sent again with the script")

	// Each answer is Extend's: the same calls, one at a time, answer the
	// same kinds.
	for i, e := range exts[40:] {
		_, err := s.Extend(ctx, e.Key, e.Token, e.TTL)
		assert.Equal(t, errKind(out[40+i].Err), errKind(err), "%s: the batch answers as Extend does", e.Key)
	}
}

// TestRedlockSemExtendBatch: SemExtendBatch extends permits as SemExtend
// does, on every node.
func TestRedlockSemExtendBatch(t *testing.T) {
	t.Parallel()
	srvs, s := batchNodes(t)
	ctx := backendtest.Ctx(t)
	var exts []lockstore.Extension
	for range 3 {
		p, err := s.SemAcquire(ctx, "batch/sem", lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: 10 * time.Second, Limit: 5})
		require.NoError(t, err)
		exts = append(exts, lockstore.Extension{Key: p.Key, Token: p.Token, TTL: time.Minute})
	}
	exts = append(exts, lockstore.Extension{Key: "batch/sem", Token: lockstore.NewToken(), TTL: time.Minute})
	out := s.SemExtendBatch(ctx, exts)
	require.Len(t, out, len(exts))
	for i := range 3 {
		if assert.NoError(t, out[i].Err) {
			assert.Equal(t, time.Minute, out[i].Permit.Granted)
			assert.Equal(t, 5, out[i].Permit.Limit)
		}
	}
	assert.ErrorIs(t, out[3].Err, lockstore.ErrTokenMismatch, "permits held, none the token's")
	_, err := s.SemExtend(ctx, exts[3].Key, exts[3].Token, exts[3].TTL)
	assert.Equal(t, errKind(out[3].Err), errKind(err), "the batch answers as SemExtend does")
	for _, srv := range srvs {
		expiries := srv.Client().ZRangeWithScores(ctx, script.SemExpiryKey("batch/sem"), 0, -1).Val()
		require.Len(t, expiries, 3)
		for _, z := range expiries {
			assert.Greater(t, time.UnixMilli(int64(z.Score)), time.Now().Add(50*time.Second), "every permit lengthened on every node")
		}
	}
}

// TestRedlockExtendBatchNodesDown: with one node of three down, a batch
// extends on the other two; with two down, it answers every extension
// unavailable and promises nothing.
func TestRedlockExtendBatchNodesDown(t *testing.T) {
	t.Parallel()
	srvs, s := batchNodes(t)
	ctx := backendtest.Ctx(t)
	exts := leasesToExtend(t, s, "down", 10)
	srvs[0].Kill()
	for i, e := range s.ExtendBatch(ctx, exts) {
		if assert.NoError(t, e.Err, exts[i].Key) {
			assert.Equal(t, time.Minute, e.Lease.Granted)
		}
	}
	srvs[1].Kill()
	for i, e := range s.ExtendBatch(ctx, exts) {
		assert.ErrorIs(t, e.Err, lockstore.ErrUnavailable, exts[i].Key)
		assert.Zero(t, e.Lease, exts[i].Key)
	}
}

// batchNodes is a Redlock over three nodes of its own, ready, with a node
// timeout roomy enough for a loaded machine.
func batchNodes(t *testing.T) ([]*redistest.Server, *redlock.Store) {
	t.Helper()
	srvs := backendtest.StartNodes(t, 3)
	s := backendtest.OpenRedlock(t, backendtest.URLs(srvs), redlock.Options{NodeTimeout: time.Second})
	ready(t, s)
	return srvs, s
}

// leasesToExtend acquires n leases of 10 s (prefix/0 …) and asks to extend
// each to a minute.
func leasesToExtend(t *testing.T, s *redlock.Store, prefix string, n int) []lockstore.Extension {
	t.Helper()
	exts := make([]lockstore.Extension, 0, n)
	for i := range n {
		l := mustAcquire(t, s, fmt.Sprintf("%s/%d", prefix, i), 10*time.Second)
		exts = append(exts, lockstore.Extension{Key: l.Key, Token: l.Token, TTL: time.Minute})
	}
	return exts
}

// mustAcquire takes key, retrying with its token while the nodes do not
// answer, as a client would (under make test's load a 50 ms NodeTimeout
// is missed now and then).
func mustAcquire(t *testing.T, s *redlock.Store, key string, ttl time.Duration) lockstore.Lease {
	t.Helper()
	req := lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: ttl}
	var l lockstore.Lease
	_, err := retryUnavailable(func() (err error) {
		l, err = s.Acquire(backendtest.Ctx(t), key, req)
		return err
	})
	require.NoError(t, err, key)
	return l
}

func evalCalls(t *testing.T, srvs []*redistest.Server) int64 {
	t.Helper()
	var n int64
	for _, srv := range srvs {
		calls, err := srv.CommandCalls(context.Background())
		require.NoError(t, err)
		n += calls["eval"]
	}
	return n
}

// errKind names which of the store's errors err is.
func errKind(err error) string {
	if err == nil {
		return "nil"
	}
	for _, k := range []error{lockstore.ErrNotHeld, lockstore.ErrTokenMismatch, lockstore.ErrInvalid, lockstore.ErrUnavailable} {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	return err.Error()
}
