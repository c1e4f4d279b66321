package middleware

import (
	"context"
	"net/http"
	"strconv"

	chimw "github.com/go-chi/chi/v5/middleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ProblemTypeKey is the server span's attribute for the problem type URI a
// request was answered with (RFC 9457), set by SpanProblem.
const ProblemTypeKey = attribute.Key("lockgw.problem.type")

// Trace gives every request one server span, continuing the trace of the
// caller's W3C traceparent (through prop), and puts it in the request's
// context so that the spans of the work done for it (waiting, backend
// calls) are its children. The span is named by the route pattern the
// router matched ("PUT /locks/*"), never by the path, and records the
// status; a 5xx marks it failed. Like Observe it learns the route only
// after the router ran, so it wraps the router.
//
// A gateway with tracing off does not install it: it is never a no-op
// that still costs every request a context and a span.
func Trace(tp trace.TracerProvider, prop propagation.TextMapPropagator) func(http.Handler) http.Handler {
	if tp == nil || prop == nil {
		panic("middleware.Trace: nil tracer provider or propagator")
	}
	tracer := tp.Tracer("github.com/lockgateway/lockgateway/middleware")
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			method := boundedMethod(r.Method)
			ctx, span := tracer.Start(ctx, method,
				trace.WithSpanKind(trace.SpanKindServer),
				// No url.path: like the access log, spans carry the route
				// pattern, never the key.
				trace.WithAttributes(semconv.HTTPRequestMethodKey.String(method)))
			if id := GetRequestID(ctx); id != "" {
				span.SetAttributes(attribute.String("lockgw.request_id", id))
			}
			ww, ok := w.(chimw.WrapResponseWriter)
			if !ok {
				ww = chimw.NewWrapResponseWriter(w, r.ProtoMajor)
			}
			r = r.WithContext(ctx)
			ended := false
			defer func() {
				if !ended { // a panic went through
					span.End()
				}
			}()
			next.ServeHTTP(ww, r)
			status := ww.Status()
			if status == 0 {
				status = http.StatusOK
			}
			route := routePattern(r)
			if route != "unmatched" {
				span.SetName(method + " " + route)
				span.SetAttributes(semconv.HTTPRoute(route))
			}
			span.SetAttributes(semconv.HTTPResponseStatusCode(status))
			if status >= 500 {
				// Server spans fail on 5xx only: a 409 is the lock
				// service answering, not failing.
				span.SetStatus(codes.Error, strconv.Itoa(status))
				span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(status)))
			}
			ended = true
			if d := detached(r); d != nil { // the span ends when the request does (detach.go)
				d.atEnd(func(int64) { span.End() })
				return
			}
			span.End()
		})
	}
}

// SpanProblem records on ctx's span the problem type a request is answered
// with. With tracing off the span is a no-op and this costs a context
// lookup.
func SpanProblem(ctx context.Context, typeURI string) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(ProblemTypeKey.String(typeURI))
	}
}

// boundedMethod is the method as a span attribute: a client chooses it,
// so anything but the standard ones is _OTHER, as the conventions say.
func boundedMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodPost, http.MethodOptions:
		return m
	}
	return "_OTHER"
}
