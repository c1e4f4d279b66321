package redis

import (
	"context"
	_ "embed"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

var _ lockstore.Windows = (*Store)(nil)

// TakeWindow implements Windows with one script and no fence counter.
func (s *Store) TakeWindow(ctx context.Context, key, id string, window time.Duration) (time.Duration, error) {
	if err := lockstore.CheckAcquire(key, lockstore.AcquireRequest{Token: id, TTL: window}); err != nil {
		return 0, err
	}
	ms, err := script.WindowScript.Run(ctx, s.client, []string{script.WindowKey(key)}, id, window.Milliseconds()).Int64()
	if err != nil {
		return 0, script.RedisErr(err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
