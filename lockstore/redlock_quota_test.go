package lockstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/lockstore"
)

// Redlock does not count locks per user yet: a quota is refused, never
// silently ignored, and nothing is taken.
func TestRedlockRefusesQuota(t *testing.T) {
	t.Parallel()
	s := openRedlock(t, urlsOf(startNodes(t, 3)), lockstore.RedlockOptions{NodeTimeout: roomy})
	_, err := s.Acquire(testCtx(t), "jobs/q", lockstore.AcquireRequest{
		Token: lockstore.NewToken(), TTL: time.Second, Quota: lockstore.Quota{User: "user:a", Max: 1},
	})
	require.ErrorIs(t, err, lockstore.ErrInvalid)
	_, err = s.Inspect(testCtx(t), "jobs/q")
	require.ErrorIs(t, err, lockstore.ErrNotHeld)
}
