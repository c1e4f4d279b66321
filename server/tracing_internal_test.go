package server

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestTracingBadVariable: an OTEL_* value the gateway cannot honour stops
// it at start-up, saying what to write instead.
func TestTracingBadVariable(t *testing.T) {
	env := map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}
	err := Run(t.Context(), nil, func(k string) string { return env[k] }, nopWriter{}, nopWriter{})
	assert.ErrorContains(t, err, `OTEL_TRACES_EXPORTER="zipkin": the gateway exports traces over OTLP only; use otlp (or none)`)
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
