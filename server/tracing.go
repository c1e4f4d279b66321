package server

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgateway/lockgateway"
	"github.com/lockgateway/lockgateway/internal/tracing"
	"github.com/lockgateway/lockgateway/lockstore"
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

// startWait starts the span of an acquire that may wait (for a lock or a
// permit): from its first try to its answer, so that the backend calls it
// makes, the first try and those after each wake-up, are its children.
// nil when tracing is off or the request is not traced.
func startWait(ctx context.Context, t trace.Tracer, name string, wait time.Duration) (context.Context, trace.Span) {
	if t == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, nil
	}
	return t.Start(ctx, name, trace.WithAttributes(attribute.Int64("lockgw.wait.max_ms", wait.Milliseconds())))
}

// endWait ends a wait's span with how it ended: granted, held (the wait
// ran out), abandoned (the client left), or failed.
func endWait(span trace.Span, err error) {
	if span == nil {
		return
	}
	outcome := "granted"
	switch {
	case err == nil:
	case errors.Is(err, lockstore.ErrHeld), errors.Is(err, lockstore.ErrSemaphoreFull):
		outcome = "timed_out"
	case errors.Is(err, context.Canceled):
		outcome = "abandoned"
	default:
		outcome = "failed"
		span.SetStatus(codes.Error, "the wait ended without an answer from the backend")
	}
	span.SetAttributes(attribute.String("lockgw.wait.outcome", outcome))
	span.End()
}
