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
	return script.TakeWindow(ctx, s.client, key, id, window)
}
