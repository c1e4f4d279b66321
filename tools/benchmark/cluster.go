package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/lockgateway/lockgateway/internal/redistest"
)

// The Cluster rows: a gateway in cluster mode over three masters
// (redistest.RunCluster), with the default per-user cap and without one.
// Every client's key hashes to its own slot, so the load spreads over the
// shards; with the cap on, each grant also reserves a place in the user's
// set on its own shard, and each release takes it out (one more script
// each: lockstore/redis/cluster_quota.go), which the second row leaves out.

// clusterClients loads the Cluster gateway with the cap on or off.
func clusterClients(quota bool) func(ctx context.Context, b *bench, spec rowSpec, n int, prefix string) ([]client, *target, error) {
	return func(ctx context.Context, b *bench, spec rowSpec, n int, prefix string) ([]client, *target, error) {
		t, err := b.clusterGateway(ctx, quota)
		if err != nil {
			return nil, nil, err
		}
		return lockClients(b, spec, n, prefix, t.addr), t, nil
	}
}

// clusterGateway starts the cluster once, and one gateway on it per
// setting of the cap.
func (b *bench) clusterGateway(ctx context.Context, quota bool) (*target, error) {
	if t := b.clusterGWs[quota]; t != nil {
		return t, nil
	}
	if b.cluster == nil {
		out, err := os.Create(filepath.Join(b.dir, "cluster.out"))
		if err != nil {
			return nil, err
		}
		b.logs = append(b.logs, out)
		c, err := redistest.RunCluster(redistest.Options{Bin: b.redisBin, Dir: filepath.Join(b.dir, "cluster"), Output: out, DieWithParent: true}, 3)
		if c != nil {
			b.cluster = c // killed by closeCluster, even half made
		}
		if err != nil {
			return nil, err
		}
	}
	name, cap := "gateway (cluster)", "auto"
	if !quota {
		name, cap = "gateway (cluster, no quota)", "0"
	}
	t, err := b.startGateway(ctx, name,
		"LOCKGW_BACKEND=redis", "LOCKGW_REDIS_MODE=cluster", "LOCKGW_REDIS_URL="+b.cluster.URL(),
		"LOCKGW_MAX_LOCKS_PER_USER="+cap)
	if err != nil {
		return nil, err
	}
	if b.clusterGWs == nil {
		b.clusterGWs = map[bool]*target{}
	}
	b.clusterGWs[quota] = t
	return t, nil
}

// closeCluster stops the Cluster gateways and the cluster.
func (b *bench) closeCluster() error {
	var errs []error
	for _, t := range b.clusterGWs {
		if t.stop != nil {
			errs = append(errs, t.stop())
		}
	}
	if b.cluster != nil {
		b.cluster.Kill()
	}
	return errors.Join(errs...)
}
