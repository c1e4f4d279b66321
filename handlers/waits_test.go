package handlers

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/lockgateway/lockgateway/middleware"
)

// TestTracingOffAllocatesNothing: with tracing off what still runs on a
// request's path (the wait span's guard, the problem's attribute) costs
// no allocation. server's BenchmarkCycleTracing/off shows the whole cycle's
// allocations equal to BenchmarkCycle's.
func TestTracingOffAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		c, span := startWait(ctx, nil, "lock wait", time.Second)
		endWait(span, nil)
		middleware.SpanProblem(c, "https://lockgateway.dev/problems/lock-held")
	}))
}
