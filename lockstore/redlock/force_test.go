package redlock_test

import (
	"testing"

	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore/lockstoretest"
	"github.com/lockgateway/lockgateway/lockstore/redlock"
)

// The forced-release suite on Redis and Redlock, each store a client of
// its own (the holder's gateway and the administrator's).

func TestRedisForce(t *testing.T) {
	srv := redistest.Start(t)
	lockstoretest.RunForce(t, func(t *testing.T) lockstoretest.Forcing { return backendtest.NewRedis(t, srv) })
}

func TestRedisClusterForce(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	lockstoretest.RunForce(t, func(t *testing.T) lockstoretest.Forcing { return backendtest.NewCluster(t, c) })
}

func TestRedlockForce(t *testing.T) {
	t.Parallel()
	urls := backendtest.URLs(backendtest.StartNodes(t, 5))
	lockstoretest.RunForce(t, func(t *testing.T) lockstoretest.Forcing {
		return backendtest.OpenRedlock(t, urls, redlock.Options{NodeTimeout: backendtest.Roomy})
	})
}
