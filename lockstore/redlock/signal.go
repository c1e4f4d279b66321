package redlock

import (
	"context"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

// Signal implements Signaler with the key's channel on every node: a
// change on any node is worth a majority read. A node that cannot be
// reached only means fewer signals; the hub's poll covers them.
func (r *Store) Signal(ctx context.Context, key string, wake chan struct{}) (func(), error) {
	return r.listenAs(ctx, script.Channel(key), lockstore.WatchPrefix+lockstore.NewToken(), wake), nil
}

// SemSignal implements SemSignaler with the semaphore's channel on every
// node.
func (r *Store) SemSignal(ctx context.Context, key string, wake chan struct{}) (func(), error) {
	return r.listenAs(ctx, script.SemChannel(key), lockstore.WatchPrefix+lockstore.NewToken(), wake), nil
}
