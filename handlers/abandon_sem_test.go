package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/handlers"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/memory"
)

// A permit granted to a client that has gone is released as a lock's
// lease is (abandon_test.go), including when the release, or the grant's
// own answer, gets no answer from the store.

// lateSems is a real Memory store whose acquire answers "unavailable" once
// the client has gone, while the grant itself lands a moment later (a
// Redis that ran the script after the gateway gave up), and whose first
// failRelease releases get no answer.
type lateSems struct {
	*memory.Store
	late        time.Duration // 0: grant at once, and answer it
	granted     chan struct{}
	failRelease atomic.Int32
}

func (s *lateSems) SemAcquire(ctx context.Context, key string, req lockstore.PermitRequest) (lockstore.Permit, error) {
	<-ctx.Done()
	if s.late == 0 {
		p, err := s.Store.SemAcquire(context.Background(), key, req)
		close(s.granted)
		return p, err
	}
	go func() {
		time.Sleep(s.late)
		_, _ = s.Store.SemAcquire(context.Background(), key, req)
		close(s.granted)
	}()
	return lockstore.Permit{}, fmt.Errorf("%w: the store did not answer in time", lockstore.ErrUnavailable)
}

func (s *lateSems) SemRelease(ctx context.Context, key, token string) error {
	if s.failRelease.Add(-1) >= 0 {
		return fmt.Errorf("%w: the store did not answer", lockstore.ErrUnavailable)
	}
	return s.Store.SemRelease(ctx, key, token)
}

func abandonPermit(t *testing.T, sems *lateSems) {
	t.Helper()
	limits := handlers.Limits{DefaultTTL: time.Minute, MaxTTL: time.Hour, MaxWait: time.Minute, MaxBodyBytes: 1 << 16, BackendTimeout: time.Second}
	h := handlers.NewSemaphores(sems, handlers.NewLocks(sems.Store, limits, zerolog.Nop(), nil, nil))
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest("PUT", "/semaphores/jobs/nightly", strings.NewReader(`{"limit":1}`)).WithContext(ctx)
	req.Header.Set("Content-Type", "application/json")
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	h.Acquire().ServeHTTP(httptest.NewRecorder(), req)
	<-sems.granted
	require.Eventually(t, func() bool {
		_, err := sems.SemInspect(context.Background(), "jobs/nightly")
		return errors.Is(err, lockstore.ErrNotHeld)
	}, 3*time.Second, 10*time.Millisecond, "the permit nobody can learn the token of is released, not left to its TTL")
	_, err := sems.SemInspect(context.Background(), "jobs/nightly")
	assert.ErrorIs(t, err, lockstore.ErrNotHeld)
}

// TestAbandonedPermitReleaseIsRetried: the release of a permit granted as
// its client left got no answer; it is tried again, as a lock's is
// (before, one attempt, and the permit stayed until its TTL).
func TestAbandonedPermitReleaseIsRetried(t *testing.T) {
	sems := &lateSems{Store: memory.New(), granted: make(chan struct{})}
	sems.failRelease.Store(2)
	abandonPermit(t, sems)
}

// TestLateGrantToAbandonedPermitIsReleased: the acquire answered
// "unavailable" after the client left, and the grant landed after that:
// it is released once it lands, as a lock's (before, nothing released it).
func TestLateGrantToAbandonedPermitIsReleased(t *testing.T) {
	sems := &lateSems{Store: memory.New(), late: 150 * time.Millisecond, granted: make(chan struct{})}
	abandonPermit(t, sems)
}
