package redlock_test

import (
	"testing"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"
	"github.com/lockgateway/lockgateway/lockstore/redlock"
)

// TestRedlockForcedRenewals: a renewal that finds the forced release's
// tombstone on a majority of the nodes answers ErrForced, through another
// store (gateway) on the same nodes.
func TestRedlockForcedRenewals(t *testing.T) {
	t.Parallel()
	urls := backendtest.URLs(backendtest.StartNodes(t, 5))
	opts := redlock.Options{NodeTimeout: backendtest.Roomy}
	backendtest.ForcedRenewals(t, backendtest.OpenRedlock(t, urls, opts), backendtest.OpenRedlock(t, urls, opts))
}
