package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/lockgateway/lockgateway/internal/redistest"
)

// The Sentinel rows: a gateway in sentinel mode over a master, one replica
// and three sentinels (redistest.RunSentinel), answering at once or only
// once the replica acknowledged each grant and extend
// (LOCKGW_REDIS_WAIT_REPLICAS). What the second costs over the first is
// the price of a lease that survives a failover (docs/redis-sentinel.md).

// sentinelClients loads the Sentinel gateway that waits for that many
// replicas' acknowledgements (0: none).
func sentinelClients(replicas int) func(ctx context.Context, b *bench, spec rowSpec, n int, prefix string) ([]client, *target, error) {
	return func(ctx context.Context, b *bench, spec rowSpec, n int, prefix string) ([]client, *target, error) {
		t, err := b.sentinelGateway(ctx, replicas)
		if err != nil {
			return nil, nil, err
		}
		return lockClients(b, spec, n, prefix, t.addr), t, nil
	}
}

// sentinelGateway starts the Sentinel set-up once, and one gateway on it
// per replica count.
func (b *bench) sentinelGateway(ctx context.Context, replicas int) (*target, error) {
	if t := b.sentinelGWs[replicas]; t != nil {
		return t, nil
	}
	if b.sentinels == nil {
		out, err := os.Create(filepath.Join(b.dir, "sentinel.out"))
		if err != nil {
			return nil, err
		}
		b.logs = append(b.logs, out)
		st, err := redistest.RunSentinel(redistest.Options{Bin: b.redisBin, Dir: filepath.Join(b.dir, "sentinel"), Output: out, DieWithParent: true})
		if err != nil {
			return nil, err
		}
		b.sentinels = st
	}
	t, err := b.startGateway(ctx, fmt.Sprintf("gateway (sentinel, wait %d)", replicas),
		"LOCKGW_BACKEND=redis", "LOCKGW_REDIS_MODE=sentinel", "LOCKGW_REDIS_URL="+b.sentinels.URL(),
		"LOCKGW_REDIS_WAIT_REPLICAS="+strconv.Itoa(replicas))
	if err != nil {
		return nil, err
	}
	if b.sentinelGWs == nil {
		b.sentinelGWs = map[int]*target{}
	}
	b.sentinelGWs[replicas] = t
	return t, nil
}

// closeSentinel stops the Sentinel gateways and the set-up.
func (b *bench) closeSentinel() error {
	var errs []error
	for _, t := range b.sentinelGWs {
		if t.stop != nil {
			errs = append(errs, t.stop())
		}
	}
	if b.sentinels != nil {
		b.sentinels.Kill()
	}
	return errors.Join(errs...)
}
