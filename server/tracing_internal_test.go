package server

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/lockgateway/lockgateway/middleware"
)

// TestTracingOffAllocatesNothing: with tracing off what still runs on a
// request's path (the wait span's guard, the problem's attribute) costs
// no allocation. BenchmarkCycleTracing/off shows the whole cycle's
// allocations equal to BenchmarkCycle's.
func TestTracingOffAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		c, span := startWait(ctx, nil, "lock wait", time.Second)
		endWait(span, nil)
		middleware.SpanProblem(c, "https://lockgateway.dev/problems/lock-held")
	}))
}

// TestTracingBadVariable: an OTEL_* value the gateway cannot honour stops
// it at start-up, saying what to write instead.
func TestTracingBadVariable(t *testing.T) {
	env := map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}
	err := Run(t.Context(), nil, func(k string) string { return env[k] }, nopWriter{}, nopWriter{})
	assert.ErrorContains(t, err, `OTEL_TRACES_EXPORTER="zipkin": the gateway exports traces over OTLP only; use otlp (or none)`)
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
