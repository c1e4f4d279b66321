package redis

import (
	"context"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

// Signal implements Signaler with the key's pub/sub channel: releases
// (the scripts have always published them, for waiters) and grants and
// extends (published for watchers, payloads "!acquired", "!extended").
func (s *Store) Signal(ctx context.Context, key string, wake chan struct{}) (func(), error) {
	id := lockstore.WatchPrefix + lockstore.NewToken()
	if err := s.notifier.Listen(ctx, script.Channel(key), id, wake); err != nil {
		return nil, err
	}
	return func() { s.notifier.Stop(script.Channel(key), id) }, nil
}

// SemSignal implements SemSignaler with the semaphore's channel.
func (s *Store) SemSignal(ctx context.Context, key string, wake chan struct{}) (func(), error) {
	id := lockstore.WatchPrefix + lockstore.NewToken()
	if err := s.notifier.Listen(ctx, script.SemChannel(key), id, wake); err != nil {
		return nil, err
	}
	return func() { s.notifier.Stop(script.SemChannel(key), id) }, nil
}
