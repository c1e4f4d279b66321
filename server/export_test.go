package server

import (
	"context"
	"io"

	"go.opentelemetry.io/otel/trace"
)

// RunTraced returns Run with its spans going to tp, in place of the
// provider the OTEL_* variables would make.
func RunTraced(tp trace.TracerProvider) func(context.Context, []string, func(string) string, io.Writer, io.Writer) error {
	return func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
		return run(ctx, args, getenv, stdout, stderr, runOptions{tracing: tp})
	}
}
