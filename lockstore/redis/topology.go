package redis

import (
	"context"
	"net"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Topology is what a Redis store says about the deployment behind it, for
// /readyz.
type Topology struct {
	Mode Mode
	// Shards is how many masters a Cluster has, as the client's slot map
	// knows them, and ShardsUp how many of them answered a PING; both 0
	// outside a Cluster. Fewer up than there are means the locks whose
	// keys hash to the others cannot be served.
	Shards, ShardsUp int
	// Master is, on Sentinel, the master's host:port as the first
	// sentinel to answer names it now; "" elsewhere, or when none answers.
	Master string
}

// Topologist is a store with a deployment shape worth reporting on
// /readyz (the redis backend: single, Sentinel or Cluster, and a Cluster's
// masters).
type Topologist interface {
	Topology(ctx context.Context) Topology
}

var _ Topologist = (*Store)(nil)

// Topology implements Topologist: the store's mode and, on a Cluster, a
// ping of every master (concurrently, within ctx).
func (s *Store) Topology(ctx context.Context) Topology {
	t := Topology{Mode: s.mode}
	for _, sc := range s.sentinels {
		if addr, err := sc.GetMasterAddrByName(ctx, s.masterName).Result(); err == nil && len(addr) == 2 {
			t.Master = net.JoinHostPort(addr[0], addr[1])
			break
		}
	}
	cc, ok := s.client.(*redis.ClusterClient)
	if !ok {
		return t
	}
	var shards, up atomic.Int32
	// ForEachMaster stops at nothing: fn never fails, so every master is
	// pinged; an error is only a slot map it could not load (0 shards).
	_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		shards.Add(1)
		if c.Ping(ctx).Err() == nil {
			up.Add(1)
		}
		return nil
	})
	t.Shards, t.ShardsUp = int(shards.Load()), int(up.Load())
	return t
}
