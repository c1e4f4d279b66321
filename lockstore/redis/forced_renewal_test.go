package redis_test

import (
	"testing"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"
)

// TestRedisForcedRenewals: a renewal finds the forced release's tombstone,
// through another store (gateway) on the same Redis.
func TestRedisForcedRenewals(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	backendtest.ForcedRenewals(t, backendtest.NewRedis(t, srv), backendtest.NewRedis(t, srv))
}
