package script

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Tracing (RedisOptions.Tracer, RedlockOptions.Tracer): one client span per
// command a request sends to Redis, a script named by its Lua file
// ("EVALSHA acquire"), on each Redlock node with that node's address. A
// command is traced only under a recording span, a request's: the probes,
// heartbeats and warm-ups that run on their own would each be a trace of
// one span. Spans carry the script's name and the server, never a key,
// an argument or a reply: arguments hold token digests.

// scriptNames names each script by its SHA-1, which is what EVALSHA sends.
var scriptNames = func() map[string]string {
	names := map[string]string{}
	for name, s := range map[string]*redis.Script{
		"acquire": AcquireScript, "extend": ExtendScript, "release": ReleaseScript, "inspect": InspectScript,
		"leave": LeaveScript, "unwait": UnwaitScript, "heartbeat": HeartbeatScript, "list": listScript,
		"quota": QuotaScript, "window": WindowScript, "confirm": ConfirmScript, "discard": DiscardScript,
		"sem_acquire": SemAcquireScript, "sem_extend": SemExtendScript, "sem_release": SemReleaseScript,
		"sem_read": SemReadScript, "sem_inspect": SemInspectScript, "sem_discard": SemDiscardScript,
		"sem_confirm": SemConfirmScript, "sem_unwait": SemUnwaitScript, "sem_leave": SemLeaveScript,
		"sem_heartbeat": SemHeartbeatScript,
	} {
		names[s.Hash()] = name
	}
	// A Redlock script that grants or lengthens goes out with the node
	// list check in front (lockstore/redlock/nodeset.go): the same name.
	for plain, g := range GuardedScripts {
		names[g.Script.Hash()] = names[plain]
	}
	return names
}()

// tracedKey marks a context whose command already has its span (a Redlock
// node call, traced by its batch): the client's hook adds no second one.
type tracedKey struct{}

// cmdTracer makes the spans; it is also the go-redis hook that does so for
// one client.
type CmdTracer struct {
	tracer trace.Tracer
	attrs  []attribute.KeyValue // the server's address and port, when known
}

// newCmdTracer returns nil when t is nil (tracing off): then nothing is
// hooked and nothing is traced.
func NewCmdTracer(t trace.Tracer, addr string) *CmdTracer {
	if t == nil {
		return nil
	}
	c := &CmdTracer{tracer: t, attrs: []attribute.KeyValue{semconv.DBSystemNameRedis}}
	if host, port, err := net.SplitHostPort(addr); err == nil {
		c.attrs = append(c.attrs, semconv.ServerAddress(host))
		if p, err := strconv.Atoi(port); err == nil {
			c.attrs = append(c.attrs, semconv.ServerPort(p))
		}
	} else if addr != "" {
		c.attrs = append(c.attrs, semconv.ServerAddress(addr)) // a Sentinel master's name
	}
	return c
}

// hook adds c to client, when tracing is on.
func (c *CmdTracer) Hook(client interface{ AddHook(redis.Hook) }) {
	if c != nil {
		client.AddHook(c)
	}
}

// start starts the span of the command args, when ctx has a recording span.
func (c *CmdTracer) start(ctx context.Context, args []any) (context.Context, trace.Span, bool) {
	if c == nil || !trace.SpanFromContext(ctx).IsRecording() || ctx.Value(tracedKey{}) != nil {
		return ctx, nil, false
	}
	op, _ := args[0].(string)
	op = strings.ToUpper(op)
	name, attrs := op, append(make([]attribute.KeyValue, 0, len(c.attrs)+2), c.attrs...)
	attrs = append(attrs, semconv.DBOperationName(op))
	if op == "EVALSHA" || op == "EVAL" {
		script := "script" // not one of ours
		if len(args) > 1 {
			if sha, ok := args[1].(string); ok {
				if op == "EVAL" { // the fallback after NOSCRIPT sends the text
					sha = redis.NewScript(sha).Hash()
				}
				if n, ok := scriptNames[sha]; ok {
					script = n
				}
			}
		}
		name += " " + script
		attrs = append(attrs, semconv.DBStoredProcedureName(script))
	}
	ctx, span := c.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx, span, true
}

// endSpan ends span with err: a Redis error reply (NOSCRIPT, OOM…) or no
// answer. redis.Nil is an answer.
func endSpan(span trace.Span, err error) {
	if err != nil && !errors.Is(err, redis.Nil) {
		span.RecordError(err)
		span.SetStatus(codes.Error, redisErrorType(err))
	}
	span.End()
}

// redisErrorType is a short, bounded description of err: the Redis error
// code (NOSCRIPT, OOM, READONLY…), or what kind of failure it was.
func redisErrorType(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	var re redis.Error
	if errors.As(err, &re) {
		code, _, _ := strings.Cut(re.Error(), " ")
		return code
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "error"
}

func (c *CmdTracer) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *CmdTracer) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		ctx, span, ok := c.start(ctx, cmd.Args())
		if !ok {
			return next(ctx, cmd)
		}
		err := next(ctx, cmd)
		endSpan(span, err)
		return err
	}
}

// ProcessPipelineHook traces nothing: the store's only pipelines are a
// Redlock node's batches, whose calls nodeBatch.traced traces one by one
// under their own requests' spans.
func (c *CmdTracer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// traced runs one script call on the node, in a span of its own that
// lasts as long as the call makes its caller wait, queueing in a batch
// included (batch.go).
func (b *Batch) traced(ctx context.Context, args []any) *redis.Cmd {
	ctx, span, ok := b.Trace.start(ctx, args)
	if !ok {
		return b.do(ctx, args)
	}
	cmd := b.do(context.WithValue(ctx, tracedKey{}, true), args)
	endSpan(span, cmd.Err())
	return cmd
}
