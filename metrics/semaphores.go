package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockgateway/lockgateway/lockstore"
)

// Semaphores returns sems with its permit operations counted: how long
// acquires take (waiting included) and how they end, and how extends and
// releases end. Like a lock's, no label carries a key or a token. The
// counters are made and registered on the first call.
func (m *Metrics) Semaphores(sems lockstore.Semaphores) lockstore.Semaphores {
	m.permitsOnce.Do(func() {
		m.permitAcquire = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lockgw_permit_acquire_duration_seconds",
			Help:    "Time to answer a semaphore permit acquire, waiting included, by outcome: acquired, renewed, full, limit_mismatch, abandoned (the client left), unavailable, error.",
			Buckets: latencyBuckets,
		}, []string{"outcome"})
		m.permitOps = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockgw_permit_ops_total",
			Help: "Semaphore permit extends and releases, by op and outcome: done, gone (no permit held: expired or never taken), mismatch (others hold, not the token), unavailable, error.",
		}, []string{"op", "outcome"})
		m.reg.MustRegister(m.permitAcquire, m.permitOps)
		for _, o := range []string{"acquired", "renewed", "full", "limit_mismatch", "abandoned", "unavailable", "error"} {
			m.permitAcquire.WithLabelValues(o)
		}
		for _, op := range []string{"extend", "release"} {
			for _, o := range []string{"done", "gone", "mismatch", "unavailable", "error"} {
				m.permitOps.WithLabelValues(op, o)
			}
		}
	})
	return observedSems{Semaphores: sems, m: m}
}

type observedSems struct {
	lockstore.Semaphores
	m *Metrics
}

func (s observedSems) SemAcquire(ctx context.Context, key string, req lockstore.PermitRequest) (lockstore.Permit, error) {
	start := time.Now()
	p, err := s.Semaphores.SemAcquire(ctx, key, req)
	outcome := "acquired"
	switch {
	case err == nil && p.Renewed:
		outcome = "renewed"
	case err == nil:
	case errors.Is(err, lockstore.ErrSemaphoreFull):
		outcome = "full"
	case errors.Is(err, lockstore.ErrLimitMismatch):
		outcome = "limit_mismatch"
	case errors.Is(err, context.Canceled):
		outcome = "abandoned"
	default:
		outcome = failure(err)
	}
	s.m.permitAcquire.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
	return p, err
}

func (s observedSems) SemExtend(ctx context.Context, key, token string, ttl time.Duration) (lockstore.Permit, error) {
	p, err := s.Semaphores.SemExtend(ctx, key, token, ttl)
	s.m.permitOps.WithLabelValues("extend", opOutcome(err)).Inc()
	return p, err
}

var _ lockstore.BatchSemExtender = observedSems{}

// SemExtendBatch passes holds' batched renewals of permits through to the
// store (lockstore.SemExtendAll: one pipeline where the store batches),
// each counted as an extend. Without it the handlers' renewer found no
// batch method here and sent every renewal alone.
func (s observedSems) SemExtendBatch(ctx context.Context, exts []lockstore.Extension) []lockstore.SemExtended {
	out := lockstore.SemExtendAll(ctx, s.Semaphores, exts)
	for _, r := range out {
		s.m.permitOps.WithLabelValues("extend", opOutcome(r.Err)).Inc()
	}
	return out
}

func (s observedSems) SemRelease(ctx context.Context, key, token string) error {
	err := s.Semaphores.SemRelease(ctx, key, token)
	s.m.permitOps.WithLabelValues("release", opOutcome(err)).Inc()
	return err
}

func opOutcome(err error) string {
	switch {
	case err == nil:
		return "done"
	case errors.Is(err, lockstore.ErrNotHeld):
		return "gone"
	case errors.Is(err, lockstore.ErrTokenMismatch):
		return "mismatch"
	}
	return failure(err)
}

// failure: the store did not answer (or refused to write), or anything
// else, such as a request the store found invalid.
func failure(err error) string {
	if errors.Is(err, lockstore.ErrUnavailable) || errors.Is(err, lockstore.ErrRefused) {
		return "unavailable"
	}
	return "error"
}
