package redlock_test

import (
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/redlock"
	"github.com/stretchr/testify/require"
)

// Redlock does not count locks per user yet: a quota is refused, never
// silently ignored, and nothing is taken.
func TestRedlockRefusesQuota(t *testing.T) {
	t.Parallel()
	s := backendtest.OpenRedlock(t, backendtest.URLs(backendtest.StartNodes(t, 3)), redlock.Options{NodeTimeout: backendtest.Roomy})
	_, err := s.Acquire(backendtest.Ctx(t), "jobs/q", lockstore.AcquireRequest{
		Token: lockstore.NewToken(), TTL: time.Second, Quota: lockstore.Quota{User: "user:a", Max: 1},
	})
	require.ErrorIs(t, err, lockstore.ErrInvalid)
	_, err = s.Inspect(backendtest.Ctx(t), "jobs/q")
	require.ErrorIs(t, err, lockstore.ErrNotHeld)
}
