package redlock_test

import (
	"context"
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

// TestRedlockRenewalsWaitPastNodeTimeout: a batch of renewals (a hold
// renewer's) waits for its nodes past NodeTimeout, up to a tenth of its
// leases' TTL: two nodes of three stalled for 200 ms, four NodeTimeouts,
// and every lease is still extended. With NodeTimeout as its bound, the
// batch answered every lease 503 (two of three nodes did not answer).
func TestRedlockRenewalsWaitPastNodeTimeout(t *testing.T) {
	t.Parallel()
	srvs := backendtest.StartNodes(t, 3)
	s := backendtest.OpenRedlock(t, backendtest.URLs(srvs), redlock.Options{NodeTimeout: 50 * time.Millisecond})
	ready(t, s)
	ctx := backendtest.Ctx(t)
	var exts []lockstore.Extension
	for _, e := range leasesOnEveryNode(t, srvs, s, "slow", 10) {
		e.TTL = 10 * time.Second // a wait of up to 1 s
		exts = append(exts, e)
	}

	srvs[0].Pause()
	srvs[1].Pause()
	resumed := make(chan struct{})
	go func() {
		defer close(resumed)
		time.Sleep(200 * time.Millisecond)
		srvs[0].Resume()
		srvs[1].Resume()
	}()
	before := time.Now()
	out := s.ExtendBatch(ctx, exts)
	<-resumed
	for i, o := range out {
		if assert.NoError(t, o.Err, exts[i].Key) {
			assert.False(t, o.Lease.ExpiresAt.Before(before.Add(9*time.Second)), "the validity counts the wait, from before it")
		}
	}
}

// TestRedlockAdmissionCutAndRegrown: acquire rounds that hear no majority
// because calls timed out (two nodes of three stalled) halve the limit on
// acquire rounds in flight, locks' and permits' alike; rounds that hear
// their majority, after a second without a cut, double it back.
func TestRedlockAdmissionCutAndRegrown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		acquire func(s *redlock.Store, key string) error
	}{
		{"lock", func(s *redlock.Store, key string) error {
			_, err := s.Acquire(backendtest.Ctx(t), key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 10 * time.Second})
			return err
		}},
		{"permit", func(s *redlock.Store, key string) error {
			_, err := s.SemAcquire(backendtest.Ctx(t), key, lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: 10 * time.Second, Limit: 2})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srvs := backendtest.StartNodes(t, 3)
			s := backendtest.OpenRedlock(t, backendtest.URLs(srvs), redlock.Options{NodeTimeout: 50 * time.Millisecond})
			ready(t, s)
			full := s.AdmissionLimit()

			srvs[0].Pause()
			srvs[1].Pause()
			err := tc.acquire(s, "admit/stalled")
			srvs[0].Resume()
			srvs[1].Resume()
			require.ErrorIs(t, err, lockstore.ErrUnavailable)
			assert.Equal(t, full/2, s.AdmissionLimit(), "a round that timed out without its majority halves the limit")
			assert.Equal(t, redlock.Admission{Limit: int(full / 2)}, s.Admission(), "what operators see: the limit, nothing in flight or refused")

			deadline := time.Now().Add(20 * time.Second)
			for i := 0; s.AdmissionLimit() < full; i++ {
				require.True(t, time.Now().Before(deadline), "the limit grew back to %v only", s.AdmissionLimit())
				if err := tc.acquire(s, fmt.Sprintf("admit/calm/%d", i)); err != nil {
					require.ErrorIs(t, err, lockstore.ErrUnavailable, "nodes coming back") // marked down until probed
				}
				time.Sleep(100 * time.Millisecond)
			}
			assert.Zero(t, s.Admission().Limit, "grown back: no limit, reported as 0")
		})
	}
}

// TestRedlockRenewalsJudgedBeforeTheirDeadline: a batch of renewals under
// a deadline shorter than its wait (10 s leases: a wait of 1 s; the hold
// renewer's deadline, LOCKGW_BACKEND_TIMEOUT, is 1 s) with one node of
// three stalled: the stalled node's calls end a NodeTimeout before the
// deadline, and every lease the other two extended is answered extended.
// Found by review: waiting up to the deadline, the batch's context had
// ended by the time it was judged, in 4 of 8 runs, and every lease was
// answered 503.
func TestRedlockRenewalsJudgedBeforeTheirDeadline(t *testing.T) {
	t.Parallel()
	srvs := backendtest.StartNodes(t, 3)
	s := backendtest.OpenRedlock(t, backendtest.URLs(srvs), redlock.Options{NodeTimeout: 50 * time.Millisecond})
	ready(t, s)
	var exts []lockstore.Extension
	for _, e := range leasesOnEveryNode(t, srvs, s, "deadline", 5) {
		e.TTL = 10 * time.Second
		exts = append(exts, e)
	}
	srvs[0].Pause()
	t.Cleanup(srvs[0].Resume)
	ctx, cancel := context.WithTimeout(backendtest.Ctx(t), time.Second)
	defer cancel()
	for i, o := range s.ExtendBatch(ctx, exts) {
		assert.NoError(t, o.Err, exts[i].Key)
	}
}

// leasesOnEveryNode is leasesToExtend with each lease on every node: a
// grant needs a majority only, and under load one node's vote came too
// late, so that with another node stalled no majority carried the lease.
// A lease found missing on a node is renewed (the same token's acquire)
// until every node has it.
func leasesOnEveryNode(t *testing.T, srvs []*redistest.Server, s *redlock.Store, prefix string, n int) []lockstore.Extension {
	t.Helper()
	exts := leasesToExtend(t, s, prefix, n)
	for _, e := range exts {
		for deadline := time.Now().Add(20 * time.Second); ; {
			missing := 0
			for _, srv := range srvs {
				if srv.Client().PTTL(context.Background(), script.LockKey(e.Key)).Val() <= 0 {
					missing++
				}
			}
			if missing == 0 {
				break
			}
			require.True(t, time.Now().Before(deadline), "%s: on every node", e.Key)
			_, _ = s.Acquire(backendtest.Ctx(t), e.Key, lockstore.AcquireRequest{Token: e.Token, TTL: 10 * time.Second})
			time.Sleep(50 * time.Millisecond)
		}
	}
	return exts
}
