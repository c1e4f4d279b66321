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
	"github.com/lockgateway/lockgateway/lockstore/memory"
)

// grantAsClientLeaves is a real Memory store whose grant lands just after
// the client went away, the race a waiting acquire can lose.
type grantAsClientLeaves struct{ *memory.Store }

func (g grantAsClientLeaves) Acquire(ctx context.Context, key string, req lockstore.AcquireRequest) (lockstore.Lease, error) {
	<-ctx.Done()
	return g.Store.Acquire(context.Background(), key, req)
}

// TestGrantToAbandonedRequestIsReleased: nobody will ever learn that
// lease's token, so it is released at once instead of blocking the key
// for its whole TTL.
func TestGrantToAbandonedRequestIsReleased(t *testing.T) {
	mem := memory.New()
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

// grantThenHold grants its first acquire only after the client went away,
// then holds the answer back until proceed is closed: the window in which
// a client that chose its own token retries with it. Later acquires go
// straight to the Memory store.
type grantThenHold struct {
	*memory.Store
	first            chan struct{} // closed by the first acquire
	granted, proceed chan struct{}
}

func (g *grantThenHold) Acquire(ctx context.Context, key string, req lockstore.AcquireRequest) (lockstore.Lease, error) {
	select {
	case <-g.first:
		return g.Store.Acquire(ctx, key, req)
	default:
		close(g.first)
	}
	<-ctx.Done()
	l, err := g.Store.Acquire(context.Background(), key, req)
	close(g.granted)
	<-g.proceed
	return l, err
}

// TestGrantToAbandonedRequestWithClientTokenIsKept: a client that chose its
// token may retry with it after losing an answer (docs/api.md tells it to),
// and its retry can be answered "200, you hold it" before the abandoned
// request's handler is done. Releasing the abandoned grant then took that
// very lease away, and another client could be granted the key while the
// first was told it held it. (Found by the chaos suite's abandon scenario.)
// A grant to a token the client chose therefore stays.
func TestGrantToAbandonedRequestWithClientTokenIsKept(t *testing.T) {
	mem := memory.New()
	store := &grantThenHold{Store: mem, first: make(chan struct{}), granted: make(chan struct{}), proceed: make(chan struct{})}
	locks := handlers.NewLocks(store, handlers.Limits{
		DefaultTTL: time.Minute, MaxTTL: time.Hour, MaxWait: time.Minute, MaxBodyBytes: 1 << 16, BackendTimeout: time.Second,
	}, zerolog.Nop(), nil, nil)
	const token = "client-chosen-token-0000000001"
	put := func(ctx context.Context) *httptest.ResponseRecorder {
		req := httptest.NewRequest("PUT", "/locks/jobs/nightly", nil).WithContext(ctx)
		req.Header.Set("Lock-Token", token)
		rec := httptest.NewRecorder()
		locks.Acquire().ServeHTTP(rec, req)
		return rec
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { put(ctx); close(done) }()
	<-store.first
	cancel() // the client gives up…
	<-store.granted
	retry := put(context.Background()) // …and retries with its token
	require.Equal(t, 200, retry.Code, "the retry finds the lease: %s", retry.Body)
	close(store.proceed)
	<-done

	l, err := mem.Inspect(context.Background(), "jobs/nightly")
	require.NoError(t, err, "the lease the retry was told it holds is still held")
	assert.Positive(t, l.Fence)
}
