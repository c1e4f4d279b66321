package handlers_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/handlers"
	"github.com/lockgateway/lockgateway/lockstore"
)

// grantAsClientLeaves is a real Memory store whose grant lands just after
// the client went away, the race a waiting acquire can lose.
type grantAsClientLeaves struct{ *lockstore.Memory }

func (g grantAsClientLeaves) Acquire(ctx context.Context, key string, req lockstore.AcquireRequest) (lockstore.Lease, error) {
	<-ctx.Done()
	return g.Memory.Acquire(context.Background(), key, req)
}

// TestGrantToAbandonedRequestIsReleased: nobody will ever learn that
// lease's token, so it is released at once instead of blocking the key
// for its whole TTL.
func TestGrantToAbandonedRequestIsReleased(t *testing.T) {
	mem := lockstore.NewMemory()
	locks := handlers.NewLocks(grantAsClientLeaves{mem}, handlers.Limits{
		DefaultTTL: time.Minute, MaxTTL: time.Hour, MaxWait: time.Minute, MaxBodyBytes: 1 << 16, BackendTimeout: time.Second,
	}, zerolog.Nop(), nil, nil)

	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest("PUT", "/locks/jobs/nightly", nil).WithContext(ctx)
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	locks.Acquire().ServeHTTP(httptest.NewRecorder(), req)

	_, err := mem.Inspect(context.Background(), "jobs/nightly")
	require.ErrorIs(t, err, lockstore.ErrNotHeld)
	assert.Zero(t, mem.Len())
}
