package client_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGeneratedCodeIsCurrent runs the //go:generate line of generate.go into
// a temporary file and fails when lockgateway.gen.go differs: openapi.yaml,
// cfg.yaml or overlay.yaml changed without `go generate ./client` (or
// `make generate`). It needs the Go module proxy, or the generator in the
// module cache.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	src, err := os.ReadFile("generate.go")
	require.NoError(t, err)
	var args []string
	for line := range strings.Lines(string(src)) {
		if rest, ok := strings.CutPrefix(line, "//go:generate "); ok {
			args = strings.Fields(rest)
		}
	}
	require.NotEmpty(t, args, "generate.go has no //go:generate line")

	out := filepath.Join(t.TempDir(), "lockgateway.gen.go")
	committed := ""
	for i, a := range args {
		if a == "-o" && i+1 < len(args) {
			committed, args[i+1] = args[i+1], out
		}
	}
	require.NotEmpty(t, committed, "the //go:generate line names its output with -o")

	cmd := exec.CommandContext(t.Context(), args[0], args[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Run(), "%s\n%s", strings.Join(args, " "), stderr.String())

	want, err := os.ReadFile(out)
	require.NoError(t, err)
	got, err := os.ReadFile(committed)
	require.NoError(t, err)
	if !bytes.Equal(want, got) {
		t.Fatalf("client/%s is stale: openapi.yaml, cfg.yaml or overlay.yaml changed since it was generated.\n"+
			"Run `go generate ./client` (or `make generate`) and commit the result.", committed)
	}
}
