package server_test

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
)

// otlpReceiver is the smallest OTLP/HTTP trace receiver: it decodes each
// export request's protobuf and keeps its resource spans.
type otlpReceiver struct {
	mu       sync.Mutex
	requests int
	spans    []*tracepb.ResourceSpans
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
		http.Error(w, "want POST /v1/traces, application/x-protobuf", http.StatusBadRequest)
		return
	}
	var req coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	o.requests++
	o.spans = append(o.spans, req.ResourceSpans...)
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func stringAttr(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// TestTracingOverOTLP: configured by the OTEL_* variables alone, a gateway
// over Redis exports its spans over OTLP/HTTP to a receiver, the request's
// trace whole: the server span, the wait under it, the scripts under that.
// The spans are flushed when the gateway stops.
func TestTracingOverOTLP(t *testing.T) {
	t.Parallel()
	recv := &otlpReceiver{}
	collector := httptest.NewServer(recv)
	defer collector.Close()
	g := apitest.Start(t, map[string]string{
		"LOCKGW_BACKEND":              "redis",
		"LOCKGW_REDIS_URL":            redistest.Start(t).URL(),
		"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL, // http/protobuf by default
	})
	waitedAcquire(t, apitest.NewClient(g.URL), "otlp")
	require.NoError(t, g.Stop())
	assert.Contains(t, g.Logs.String(), "tracing on")

	recv.mu.Lock()
	defer recv.mu.Unlock()
	require.NotZero(t, recv.requests, "no export reached the receiver")
	byID := map[string]*tracepb.Span{}
	var server *tracepb.Span
	for _, rs := range recv.spans {
		assert.Equal(t, "lockgateway", stringAttr(rs.Resource.GetAttributes(), "service.name"))
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				if string(s.TraceId) != string(mustHex(t, callerTrace)) {
					continue
				}
				byID[string(s.SpanId)] = s
				if s.Name == "PUT /locks/*" {
					server = s
				}
			}
		}
	}
	require.NotNil(t, server, "the acquire's server span was not exported")
	assert.Equal(t, mustHex(t, callerSpan), server.ParentSpanId)
	assert.Equal(t, tracepb.Span_SPAN_KIND_SERVER, server.Kind)
	assert.Equal(t, "/locks/*", stringAttr(server.Attributes, "http.route"))
	var wait, script *tracepb.Span
	for _, s := range byID {
		switch {
		case s.Name == "lock wait" && string(s.ParentSpanId) == string(server.SpanId):
			wait = s
		case s.Name == "EVALSHA acquire":
			script = s
		}
	}
	require.NotNil(t, wait, "no wait span under the server span")
	require.NotNil(t, script, "no script span")
	assert.Equal(t, wait.SpanId, script.ParentSpanId)
	assert.Equal(t, "acquire", stringAttr(script.Attributes, "db.stored_procedure.name"))
	assert.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, script.Kind)
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	return b
}
