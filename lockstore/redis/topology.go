package redis

import (
	"context"
	"net"
	"sync/atomic"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/redis/go-redis/v9"
)

var _ lockstore.Topologist = (*Store)(nil)

// Topology implements lockstore.Topologist: the store's mode and, on a
// Cluster, a ping of every master (concurrently, within ctx).
func (s *Store) Topology(ctx context.Context) lockstore.Topology {
	t := lockstore.Topology{Mode: string(s.mode)}
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
	t.Sharded = true
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
