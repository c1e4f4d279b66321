package server

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkCycleTracing is BenchmarkCycle with tracing off (the gateway as
// it runs with no OTEL_* variable: nothing installed), on with every
// request sampled (spans batched to an exporter that drops them, so what
// is measured is the gateway's work, not a network's), and on with none
// sampled (OTEL_TRACES_SAMPLER=always_off: the middleware still runs).
func BenchmarkCycleTracing(b *testing.B) {
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler // nil: tracing off
	}{
		{"off", nil},
		{"sampled", sdktrace.AlwaysSample()},
		{"unsampled", sdktrace.NeverSample()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			d, flush := cycleDeps()
			defer flush()
			if tc.sampler != nil {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(tc.sampler), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				d.tracing = tp
			}
			cycles(b, newHandler(d))
		})
	}
}
