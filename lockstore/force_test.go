package lockstore_test

import (
	"testing"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/lockstoretest"
)

// The forced-release suite on Redis and Redlock, each store a client of
// its own (the holder's gateway and the administrator's).

func TestRedisForce(t *testing.T) {
	srv := redistest.Start(t)
	lockstoretest.RunForce(t, func(t *testing.T) lockstoretest.Forcing { return newRedisStore(t, srv) })
}

func TestRedisClusterForce(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	lockstoretest.RunForce(t, func(t *testing.T) lockstoretest.Forcing { return newClusterStore(t, c) })
}

func TestRedlockForce(t *testing.T) {
	t.Parallel()
	urls := urlsOf(startNodes(t, 5))
	lockstoretest.RunForce(t, func(t *testing.T) lockstoretest.Forcing {
		return openRedlock(t, urls, lockstore.RedlockOptions{NodeTimeout: roomy})
	})
}
