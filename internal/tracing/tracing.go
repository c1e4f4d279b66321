// Package tracing sets up OpenTelemetry tracing from the standard OTEL_*
// environment variables, and only from them: no LOCKGW_* setting turns it
// on or shapes it. With none of them set it returns no provider at all, and
// the gateway then installs nothing that traces: tracing off costs nothing.
//
// What the gateway traces (docs/operations.md, "Tracing"): one server span
// per HTTP request, named by its route pattern and continuing the caller's
// W3C traceparent; a span around each acquire that may wait; and one client
// span per Redis script call, on each Redlock node, under a request's span.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Config is what the OTEL_* variables ask of the gateway. The exporter's
// other settings (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION,
// _CERTIFICATE…), the sampler (OTEL_TRACES_SAMPLER, _ARG), the batch
// processor (OTEL_BSP_*) and the resource (OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES) are read by the SDK itself, as it documents.
type Config struct {
	// On: OTEL_TRACES_EXPORTER is otlp, or an OTLP endpoint is set; and
	// OTEL_SDK_DISABLED is not true.
	On bool
	// Protocol is "http/protobuf" (the default) or "grpc":
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL.
	Protocol string
	// Endpoint is the URL spans go to: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
	// as it is, else OTEL_EXPORTER_OTLP_ENDPOINT (with /v1/traces added
	// for HTTP, as the specification says), else the SDK's default
	// (localhost:4318 for HTTP, localhost:4317 for gRPC).
	Endpoint string
}

const (
	protoHTTP = "http/protobuf"
	protoGRPC = "grpc"
)

// ParseConfig reads the OTEL_* variables through getenv. Tracing is off
// unless one of them asks for it: a gateway that nobody pointed at a
// collector sends nothing anywhere. A value it cannot honour is an error,
// for start-up to report, rather than traces silently lost.
func ParseConfig(getenv func(string) string) (Config, error) {
	var c Config
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return c, nil
	}
	tracesEndpoint := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	endpoint := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "":
		c.On = tracesEndpoint != "" || endpoint != ""
	case "none":
		return c, nil
	case "otlp":
		c.On = true
	default:
		return c, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: the gateway exports traces over OTLP only; use otlp (or none)", exp)
	}
	if !c.On {
		return c, nil
	}
	c.Protocol = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if c.Protocol == "" {
		c.Protocol = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	switch c.Protocol {
	case "":
		c.Protocol = protoHTTP
	case protoHTTP, protoGRPC:
	default:
		return c, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: use http/protobuf or grpc", c.Protocol)
	}
	for name, v := range map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": tracesEndpoint, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint} {
		if v != "" && !strings.HasPrefix(v, "http://") && !strings.HasPrefix(v, "https://") {
			return c, fmt.Errorf("%s=%q: write it as a URL, http://host:port or https://host:port", name, v)
		}
	}
	switch {
	case tracesEndpoint != "":
		c.Endpoint = tracesEndpoint
	case endpoint != "" && c.Protocol == protoHTTP:
		c.Endpoint = strings.TrimSuffix(endpoint, "/") + "/v1/traces"
	default:
		c.Endpoint = endpoint
	}
	return c, nil
}

// Propagator is the one the gateway reads incoming requests with: W3C
// traceparent and tracestate, and W3C baggage.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// NewProvider returns a provider that batches spans to the OTLP exporter c
// names. service and version name the gateway in the resource unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise. Its
// Shutdown flushes what is buffered; the caller calls it last.
func NewProvider(ctx context.Context, c Config, service, version string) (*sdktrace.TracerProvider, error) {
	if !c.On {
		return nil, errors.New("tracing: NewProvider with tracing off")
	}
	var exp *otlptrace.Exporter
	var err error
	if c.Protocol == protoGRPC {
		var opts []otlptracegrpc.Option
		if c.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(c.Endpoint))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	} else {
		var opts []otlptracehttp.Option
		if c.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(c.Endpoint))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // last: OTEL_SERVICE_NAME wins
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource from OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	// No WithSampler: the SDK reads OTEL_TRACES_SAMPLER (default
	// parentbased_always_on, so a caller's sampling decision stands).
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
