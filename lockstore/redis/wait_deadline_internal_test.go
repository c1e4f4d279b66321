package redis

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

// TestWaiterAnswersByItsDeadline: a waiting acquire (a lock's, a permit's)
// whose Redis stops answering mid-wait answers by its request's deadline,
// which the handler sets to wait + backend timeout (handlers/waits.go), as
// http-api.md promises: never a hang past it. The wait's clean-up (its
// ticket's leave.lua, with a context of its own) ran before the answer and
// kept it a second past the deadline (found by review); it runs after now.
func TestWaiterAnswersByItsDeadline(t *testing.T) {
	for _, sem := range []bool{false, true} {
		t.Run(map[bool]string{false: "lock", true: "permit"}[sem], func(t *testing.T) {
			srv := redistest.Start(t)
			const backendTimeout = time.Second // openInternal's
			s := openInternal(t, srv)
			ctx := context.Background()
			const key = "deadline/k"
			acquire := func(ctx context.Context, wait time.Duration) error {
				if sem {
					_, err := s.SemAcquire(ctx, key, lockstore.PermitRequest{Token: lockstore.NewToken(), TTL: time.Minute, Limit: 1, Wait: wait})
					return err
				}
				_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute, Wait: wait})
				return err
			}
			queue := script.QueueKey(key)
			if sem {
				queue = script.SemQueueKey(key)
			}
			require.NoError(t, acquire(ctx, 0), "the holder")

			const wait = 1500 * time.Millisecond
			start := time.Now()
			reqCtx, cancel := context.WithTimeoutCause(ctx, wait+backendTimeout, lockstore.ErrUnavailable)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- acquire(reqCtx, wait) }()
			require.Eventually(t, func() bool { return srv.Client().ZCard(ctx, queue).Val() == 1 },
				5*time.Second, time.Millisecond, "the waiter queued")
			srv.Pause() // a Redis that accepts but never answers
			defer srv.Resume()

			err := <-done
			took := time.Since(start)
			t.Logf("answered %v after %v (request deadline %v)", err, took, wait+backendTimeout)
			assert.ErrorIs(t, err, lockstore.ErrUnavailable)
			assert.LessOrEqual(t, took, wait+backendTimeout+300*time.Millisecond, "answered past its request's deadline (the leave before the answer made it 0.5–1 s)")
		})
	}
}
