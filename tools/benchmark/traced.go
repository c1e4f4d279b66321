package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// The traced row (1t): row 1's gateway set-up, Redis backend, on the same
// Redis, with tracing on through the OTEL_* variables alone: every request
// sampled (a request without traceparent starts a trace, and the default
// sampler keeps it), its spans (request, script calls) batched and sent
// over OTLP/HTTP to a sink in lockbench that decodes and counts them.
// Rows 1 and 1t side by side are what tracing costs a cycle; tracing off
// (row 1) installs nothing, which BenchmarkCycleTracing in server/ shows
// allocation by allocation.

// tracedClients loads the traced gateway.
func tracedClients(ctx context.Context, b *bench, spec rowSpec, n int, prefix string) ([]client, *target, error) {
	t, err := b.tracedGateway(ctx)
	if err != nil {
		return nil, nil, err
	}
	return lockClients(b, spec, n, prefix, t.addr), t, nil
}

const tracedGatewayName = "gateway (redis, traced)"

func (b *bench) tracedGateway(ctx context.Context) (*target, error) {
	if b.traced != nil {
		return b.traced, nil
	}
	addr, err := b.redis(ctx)
	if err != nil {
		return nil, err
	}
	sink, err := startSpanSink()
	if err != nil {
		return nil, err
	}
	b.sink = sink
	t, err := b.startGateway(ctx, tracedGatewayName,
		"LOCKGW_BACKEND=redis", "LOCKGW_REDIS_URL=redis://"+addr+"/0",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+sink.addr,
		"OTEL_TRACES_SAMPLER=parentbased_always_on")
	if err != nil {
		return nil, err
	}
	b.traced = t
	return t, nil
}

// spanSink is the smallest OTLP/HTTP trace receiver: it decodes each
// export and counts its spans, so the row shows that spans really went
// out, and what the exporter's work was.
type spanSink struct {
	addr           string
	srv            *http.Server
	exports, spans atomic.Int64
	bad            atomic.Int64
}

func startSpanSink() (*spanSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &spanSink{addr: ln.Addr().String()}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve)}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *spanSink) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if err != nil || proto.Unmarshal(body, &req) != nil {
		s.bad.Add(1)
		http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
		return
	}
	s.exports.Add(1)
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			s.spans.Add(int64(len(ss.Spans)))
		}
	}
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// report says what the sink received, after the gateway stopped (and
// flushed).
func (s *spanSink) report(w io.Writer) {
	if s == nil {
		return
	}
	fmt.Fprintf(w, "lockbench: 1t: the span sink received %d spans in %d OTLP exports (%d refused)\n",
		s.spans.Load(), s.exports.Load(), s.bad.Load())
}

func (s *spanSink) close() error {
	if s == nil {
		return nil
	}
	if err := s.srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
