package server_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/server"
)

// A caller's trace: the W3C traceparent a traced client sends.
const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
	traceparent = "00-" + callerTrace + "-" + callerSpan + "-01"
)

// startTraced starts a gateway whose spans go to an in-memory exporter.
func startTraced(t *testing.T, env map[string]string) (*apitest.Client, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	g := apitest.StartWith(t, env, server.RunTraced(tp))
	return apitest.NewClient(g.URL), exp
}

// traceOf waits until the server span of the request named name is
// exported (the middleware ends it after the response went out) and
// returns the spans of the caller's trace.
func traceOf(t *testing.T, exp *tracetest.InMemoryExporter, name string) (server tracetest.SpanStub, spans tracetest.SpanStubs) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		spans = nil
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID().String() == callerTrace {
				spans = append(spans, s)
			}
		}
		i := slices.IndexFunc(spans, func(s tracetest.SpanStub) bool { return s.Name == name })
		require.GreaterOrEqual(c, i, 0, "no %q span in the caller's trace", name)
		server = spans[i]
	}, 5*time.Second, 10*time.Millisecond)
	return server, spans
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func childrenOf(spans tracetest.SpanStubs, parent tracetest.SpanStub) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range spans {
		if s.Parent.SpanID() == parent.SpanContext.SpanID() {
			out = append(out, s)
		}
	}
	return out
}

// logTrace prints the spans as a tree, for the reader of -v output.
func logTrace(t *testing.T, spans tracetest.SpanStubs, parent trace.SpanID, depth int) {
	for _, s := range spans {
		if s.Parent.SpanID() != parent {
			continue
		}
		var kv []string
		for _, a := range s.Attributes {
			kv = append(kv, fmt.Sprintf("%s=%s", a.Key, a.Value.Emit()))
		}
		t.Logf("%s%s [%v] %s", strings.Repeat("  ", depth), s.Name, s.EndTime.Sub(s.StartTime).Round(time.Microsecond), strings.Join(kv, " "))
		logTrace(t, spans, s.SpanContext.SpanID(), depth+1)
	}
}

// waitedAcquire holds key, then acquires it again with a wait, under the
// caller's traceparent, releasing the first lease 100 ms into the wait.
func waitedAcquire(t *testing.T, c *apitest.Client, key string) {
	t.Helper()
	r := c.Do(t, "PUT", lockPath(key), nil)
	require.Equal(t, http.StatusCreated, r.Status)
	token := r.JSON(t)["token"].(string)
	released := make(chan int, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		released <- c.Do(t, "DELETE", lockPath(key), nil, "Lock-Token", token).Status
	}()
	r = c.Do(t, "PUT", lockPath(key), []byte(`{"wait_ms":5000}`), append(apitest.JSON, "traceparent", traceparent)...)
	require.Equal(t, http.StatusCreated, r.Status)
	require.Equal(t, http.StatusNoContent, <-released)
}

// TestTracing: a request continues the caller's trace in one server span
// named by its route, with its status; an acquire that waits has a span
// around the wait; under it, on Redis, each script call has its own span.
func TestTracing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     func(t *testing.T) map[string]string
		scripts bool
	}{
		{"memory", func(*testing.T) map[string]string { return nil }, false},
		{"redis", func(t *testing.T) map[string]string {
			return map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_URL": redistest.Start(t).URL()}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, exp := startTraced(t, tc.env(t))
			waitedAcquire(t, c, "traced")

			srv, spans := traceOf(t, exp, "PUT /locks/*")
			t.Logf("the trace of PUT /locks/traced {\"wait_ms\":5000} with traceparent %s:", traceparent)
			logTrace(t, spans, srv.Parent.SpanID(), 0)

			assert.Equal(t, trace.SpanKindServer, srv.SpanKind)
			assert.Equal(t, callerSpan, srv.Parent.SpanID().String(), "the caller's span is the parent")
			assert.True(t, srv.Parent.IsRemote())
			a := attrs(srv)
			assert.Equal(t, "/locks/*", a["http.route"].AsString())
			assert.Equal(t, "PUT", a["http.request.method"].AsString())
			assert.Equal(t, int64(201), a["http.response.status_code"].AsInt64())
			assert.NotEmpty(t, a["lockgw.request_id"].AsString())
			assert.NotContains(t, a, attribute.Key("url.path"), "spans carry the route, never the key")
			assert.Equal(t, codes.Unset, srv.Status.Code)

			waits := childrenOf(spans, srv)
			require.Len(t, waits, 1, "one wait span under the request")
			wait := waits[0]
			assert.Equal(t, "lock wait", wait.Name)
			assert.Equal(t, "granted", attrs(wait)["lockgw.wait.outcome"].AsString())
			assert.Equal(t, int64(5000), attrs(wait)["lockgw.wait.max_ms"].AsInt64())
			assert.GreaterOrEqual(t, wait.EndTime.Sub(wait.StartTime), 50*time.Millisecond, "the wait lasted until the release")

			calls := childrenOf(spans, wait)
			if !tc.scripts {
				assert.Empty(t, calls, "the memory backend makes no backend calls")
				return
			}
			var acquires int
			for _, s := range calls {
				a := attrs(s)
				assert.Equal(t, trace.SpanKindClient, s.SpanKind, s.Name)
				assert.Equal(t, "redis", a["db.system.name"].AsString(), s.Name)
				assert.Equal(t, "127.0.0.1", a["server.address"].AsString(), s.Name)
				assert.NotZero(t, a["server.port"].AsInt64(), s.Name)
				if s.Name == "EVALSHA acquire" {
					acquires++
					assert.Equal(t, "EVALSHA", a["db.operation.name"].AsString())
					assert.Equal(t, "acquire", a["db.stored_procedure.name"].AsString())
				}
			}
			assert.GreaterOrEqual(t, acquires, 2, "a first try, and the try after the release: %v", names(calls))
		})
	}
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// TestTracingProblem: an error answer's span names its problem type; a
// 409 is an answer, not a failure of the server.
func TestTracingProblem(t *testing.T) {
	t.Parallel()
	c, exp := startTraced(t, nil)
	require.Equal(t, http.StatusCreated, c.Do(t, "PUT", lockPath("p"), nil).Status)
	require.Equal(t, http.StatusConflict, c.Do(t, "PUT", lockPath("p"), nil, "traceparent", traceparent).Status)
	srv, _ := traceOf(t, exp, "PUT /locks/*")
	a := attrs(srv)
	assert.Equal(t, int64(409), a["http.response.status_code"].AsInt64())
	assert.Equal(t, "https://lockgateway.dev/problems/lock-held", a["lockgw.problem.type"].AsString())
	assert.Equal(t, codes.Unset, srv.Status.Code)
}

// TestTracingRedlock: an acquire on Redlock has one span per node call,
// each naming its node.
func TestTracingRedlock(t *testing.T) {
	t.Parallel()
	_, env := redlockEnv(t, 3)
	c, exp := startTraced(t, env)
	require.Equal(t, http.StatusCreated, c.Do(t, "PUT", lockPath("rl"), nil, "traceparent", traceparent).Status)
	srv, spans := traceOf(t, exp, "PUT /locks/*")
	logTrace(t, spans, srv.Parent.SpanID(), 0)
	ports := map[int64]bool{}
	for _, s := range childrenOf(spans, srv) {
		if s.Name == "EVALSHA acquire" {
			ports[attrs(s)["server.port"].AsInt64()] = true
		}
	}
	assert.Len(t, ports, 3, "one acquire span per node")
}

// TestTracingOffByDefault: with no OTEL_* variable the gateway traces
// nothing, and a traceparent changes nothing in its answer.
func TestTracingUntracedRequest(t *testing.T) {
	t.Parallel()
	c, exp := startTraced(t, nil)
	// No traceparent: the request starts a trace of its own (the
	// default sampler samples it), still one server span.
	require.Equal(t, http.StatusOK, c.Do(t, "GET", "/healthz", nil).Status)
	require.Eventually(t, func() bool { return len(exp.GetSpans()) > 0 }, 5*time.Second, 10*time.Millisecond)
	s := exp.GetSpans()[0]
	assert.Equal(t, "GET /healthz", s.Name)
	assert.False(t, s.Parent.IsValid())
}

// TestTracingHoldRenewals: a hold's renewals are spans under its request's.
func TestTracingHoldRenewals(t *testing.T) {
	c, exp := startTraced(t, nil)
	events, resp := c.Hold(t, "/locks/traced-hold", []byte(`{"ttl_ms":300}`), "traceparent", traceparent)
	require.Nil(t, resp)
	for renewed := 0; renewed < 3; {
		e, ok := <-events.C
		require.True(t, ok)
		if e.Name == "renewed" {
			renewed++
		}
	}
	events.Close()
	srv, spans := traceOf(t, exp, "PUT /locks/*")
	var renewals int
	for _, s := range childrenOf(spans, srv) {
		if s.Name == "hold renewal" && attrs(s)["lockgw.hold.renewal"].AsString() == "renewed" {
			renewals++
		}
		// The request's span lasts the hold, on a connection taken over
		// from net/http too (middleware.Detach).
		assert.False(t, s.EndTime.After(srv.EndTime), "%s ended after the hold's span", s.Name)
	}
	logTrace(t, spans, trace.SpanID{}, 0)
	assert.GreaterOrEqual(t, renewals, 3, "one span per renewal, under the hold's")
}
