package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Permits makes and registers the permit series, on the first call: how
// long permit acquires take (waiting included) and how they end, and how
// extends and releases end. The gateway calls it when its store has
// semaphores; the handlers then report through PermitAcquired and
// PermitOp, as they do locks' through Acquired and the rest. Like a
// lock's, no label carries a key or a token.
func (m *Metrics) Permits() {
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
}

// PermitAcquired implements handlers.Observer: a permit acquire ended with
// outcome after took. Without Permits first it counts nothing.
func (m *Metrics) PermitAcquired(outcome string, took time.Duration) {
	if m.permitAcquire != nil {
		m.permitAcquire.WithLabelValues(outcome).Observe(took.Seconds())
	}
}

// PermitOp implements handlers.Observer: a permit extend or release (op)
// ended with outcome.
func (m *Metrics) PermitOp(op, outcome string) {
	if m.permitOps != nil {
		m.permitOps.WithLabelValues(op, outcome).Inc()
	}
}
