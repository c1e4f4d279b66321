package server

import (
	"context"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgateway/lockgateway"
	"github.com/lockgateway/lockgateway/internal/tracing"
)

// tracerName names the gateway's own spans (waiting, backend calls).
const tracerName = "github.com/lockgateway/lockgateway"

// startTracing returns the tracer provider the OTEL_* variables ask for
// (internal/tracing), or tp when a test passes one, and a func that
// flushes and stops it. With tracing off the provider is nil and the
// gateway installs nothing that traces.
func startTracing(ctx context.Context, getenv func(string) string, tp trace.TracerProvider, logger zerolog.Logger) (trace.TracerProvider, func(), error) {
	if tp != nil {
		return tp, func() {}, nil
	}
	c, err := tracing.ParseConfig(getenv)
	if err != nil || !c.On {
		return nil, func() {}, err
	}
	p, err := tracing.NewProvider(ctx, c, "lockgateway", lockgateway.Version)
	if err != nil {
		return nil, func() {}, err
	}
	endpoint := c.Endpoint
	if endpoint == "" {
		endpoint = "the SDK's default"
	}
	logger.Info().Str("protocol", c.Protocol).Str("endpoint", endpoint).Msg("tracing on: exporting spans over OTLP")
	return p, func() {
		// Spans still buffered go out now, for at most 5 s: a collector
		// that is down does not hold the exit longer.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			logger.Warn().Err(err).Msg("tracing: spans not exported at shutdown")
		}
	}, nil
}

// tracer is tp's tracer for the gateway's own spans, nil when tp is.
func tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(tracerName)
}
