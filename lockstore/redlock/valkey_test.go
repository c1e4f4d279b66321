package redlock_test

import (
	"testing"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/lockstoretest"
	"github.com/lockgateway/lockgateway/lockstore/redlock"
)

// TestRedlockMixedRedisAndValkey: a Redlock of three Valkey and two Redis
// masters grants, extends and releases as one of five Redis masters does:
// no quorum can form without a Valkey node.
func TestRedlockMixedRedisAndValkey(t *testing.T) {
	t.Parallel()
	valkey := []*redistest.Server{redistest.StartValkey(t), redistest.StartValkey(t), redistest.StartValkey(t)}
	redis := backendtest.StartNodes(t, 2)
	nodes := []*redistest.Server{valkey[0], redis[0], valkey[1], redis[1], valkey[2]}
	for _, n := range nodes {
		backendtest.LogVersion(t, n)
	}
	s := backendtest.OpenRedlock(t, backendtest.URLs(nodes), redlock.Options{NodeTimeout: backendtest.Roomy})
	lockstoretest.Run(t, func(*testing.T) lockstore.Store { return s })
	backendtest.RequireNoErrors(t, valkey...)
}
