package tracing

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want Config
		err  string
	}{
		{"nothing set: off", nil, Config{}, ""},
		{"a service name alone: off, nowhere to send", map[string]string{"OTEL_SERVICE_NAME": "locks"}, Config{}, ""},
		{"an endpoint: HTTP, /v1/traces added",
			map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"},
			Config{On: true, Protocol: "http/protobuf", Endpoint: "http://collector:4318/v1/traces"}, ""},
		{"the traces endpoint as it is",
			map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://b/traces"},
			Config{On: true, Protocol: "http/protobuf", Endpoint: "https://b/traces"}, ""},
		{"gRPC: the endpoint as it is",
			map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			Config{On: true, Protocol: "grpc", Endpoint: "http://collector:4317"}, ""},
		{"the traces protocol wins",
			map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"},
			Config{On: true, Protocol: "http/protobuf"}, ""},
		{"otlp without an endpoint: the SDK's default", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, Config{On: true, Protocol: "http/protobuf"}, ""},
		{"none wins over an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, Config{}, ""},
		{"disabled wins", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, Config{}, ""},
		{"an exporter the gateway lacks", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, Config{}, `OTEL_TRACES_EXPORTER="zipkin": the gateway exports traces over OTLP only; use otlp (or none)`},
		{"http/json", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, Config{}, `OTEL_EXPORTER_OTLP_PROTOCOL="http/json": use http/protobuf or grpc`},
		{"an endpoint without a scheme", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, Config{}, `OTEL_EXPORTER_OTLP_ENDPOINT="collector:4318": write it as a URL, http://host:port or https://host:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseConfig(func(k string) string { return tc.env[k] })
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
