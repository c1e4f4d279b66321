package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHelpAndVersion: --help prints the usage, and --version the version,
// on stdout, and the process exits 0 without starting a server; a bad flag
// exits 1 and says where the flags are listed.
func TestHelpAndVersion(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	run := func(args ...string) (stdout, stderr string, code int) {
		cmd := exec.Command(self, args...)
		cmd.Env = []string{runMain + "=1", "PATH=" + os.Getenv("PATH")}
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		if e, ok := err.(*exec.ExitError); ok {
			return out.String(), errOut.String(), e.ExitCode()
		}
		require.NoError(t, err)
		return out.String(), errOut.String(), 0
	}
	for _, flag := range []string{"--help", "-h"} {
		stdout, stderr, code := run(flag)
		assert.Equal(t, 0, code, flag)
		assert.True(t, strings.HasPrefix(stdout, "usage: lockgateway"), "%s: %s", flag, stdout)
		assert.Contains(t, stdout, "--addr value, LOCKGW_ADDR")
		assert.Contains(t, stdout, "  --pprof, LOCKGW_PPROF")
		assert.Empty(t, stderr)
	}
	stdout, stderr, code := run("--version")
	assert.Equal(t, 0, code)
	assert.Equal(t, "lockgateway dev\n", stdout)
	assert.Empty(t, stderr)

	stdout, stderr, code = run("--no-such-flag")
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Equal(t, "lockgateway: flag provided but not defined: -no-such-flag (lockgateway --help lists every flag)\n", stderr)
}
