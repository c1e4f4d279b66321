package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The test binary is the gateway too: run with this variable, it is main.
const runMain = "LOCKGATEWAY_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// gc is what a gateway process told of its garbage collector: the start-up
// log line and the runtime's own figures from /metrics.
type gc struct {
	limit, from string // as logged
	maxConns    int
	maxWaiting  int
	memLimit    float64 // go_gc_gomemlimit_bytes
	gogc        float64 // go_gc_gogc_percent
}

// startGateway runs the gateway as a process of its own, with env on top of
// a clean environment (prefix, when set, is a shell command run first in the
// same process, which then becomes the gateway), and reports its settings.
func startGateway(t *testing.T, env []string, prefix string) gc {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self)
	if prefix != "" {
		cmd = exec.Command("/bin/sh", "-c", prefix+` && exec "$0"`, self)
	}
	cmd.Env = append([]string{runMain + "=1", "LOCKGW_ADDR=127.0.0.1:0", "PATH=" + os.Getenv("PATH")}, env...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})

	var g gc
	var addr string
	lines := bufio.NewScanner(stdout)
	for addr == "" && lines.Scan() {
		var line struct {
			Message    string `json:"message"`
			Limit      string `json:"memory_limit"`
			From       string `json:"memory_limit_from"`
			MaxConns   int    `json:"max_conns"`
			MaxWaiting int    `json:"max_waiting"`
			Addr       string `json:"addr"`
		}
		require.NoError(t, json.Unmarshal(lines.Bytes(), &line), "log line %s", lines.Text())
		switch line.Message {
		case "limits":
			g.limit, g.from, g.maxConns, g.maxWaiting = line.Limit, line.From, line.MaxConns, line.MaxWaiting
		case "lockgateway listening":
			addr = line.Addr
		}
	}
	require.NotEmpty(t, addr, "the gateway did not start; stderr: %s", stderr.String())
	go func() { _, _ = io.Copy(io.Discard, stdout) }()

	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	metrics := bufio.NewScanner(resp.Body)
	metrics.Buffer(nil, 1<<20)
	for metrics.Scan() {
		name, value, _ := strings.Cut(metrics.Text(), " ")
		v, _ := strconv.ParseFloat(value, 64)
		switch name {
		case "go_gc_gomemlimit_bytes":
			g.memLimit = v
		case "go_gc_gogc_percent":
			g.gogc = v
		}
	}
	return g
}

// TestMemoryLimit: what the gateway process sets, as docs/operations.md's
// Memory and bounds says, with GOMEMLIMIT, LOCKGW_MEMORY_LIMIT, GOGC, and none of them.
func TestMemoryLimit(t *testing.T) {
	t.Run("GOMEMLIMIT", func(t *testing.T) {
		g := startGateway(t, []string{"GOMEMLIMIT=300MiB"}, "")
		assert.Equal(t, "300.0 MiB", g.limit)
		assert.Equal(t, "GOMEMLIMIT", g.from)
		assert.Equal(t, float64(300<<20), g.memLimit)
		assert.Equal(t, float64(400), g.gogc)
	})
	t.Run("LOCKGW_MEMORY_LIMIT", func(t *testing.T) {
		g := startGateway(t, []string{"LOCKGW_MEMORY_LIMIT=200MiB"}, "")
		assert.Equal(t, float64(200<<20), g.memLimit)
		assert.Equal(t, "setting", g.from)
		assert.Equal(t, 3200, g.maxConns, "one connection per 64 KiB")
		assert.Equal(t, 800, g.maxWaiting, "one waiting acquire per 256 KiB")
	})
	t.Run("GOGC", func(t *testing.T) {
		g := startGateway(t, []string{"GOGC=150", "LOCKGW_MEMORY_LIMIT=200MiB"}, "")
		assert.Equal(t, float64(150), g.gogc)
	})
	t.Run("both", func(t *testing.T) {
		self, err := os.Executable()
		require.NoError(t, err)
		cmd := exec.Command(self)
		cmd.Env = []string{runMain + "=1", "LOCKGW_ADDR=127.0.0.1:0", "GOMEMLIMIT=1GiB", "LOCKGW_MEMORY_LIMIT=2GiB"}
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "GOMEMLIMIT and LOCKGW_MEMORY_LIMIT contradict each other")
		assert.Contains(t, string(out), "set one")
	})
	t.Run("auto", func(t *testing.T) {
		g := startGateway(t, nil, "")
		cgroup, err := memlimit.FromCgroup()
		if err == nil && cgroup < math.MaxInt64 {
			assert.InEpsilon(t, 0.9*float64(cgroup), g.memLimit, 0.001, "90%% of this machine's cgroup limit")
			return
		}
		machine, err := memlimit.FromSystem()
		require.NoError(t, err)
		assert.InEpsilon(t, 0.9*float64(machine), g.memLimit, 0.001, "90%% of this machine's memory")
		assert.Contains(t, g.from, "no cgroup limit")
	})
}

// TestMemoryLimitCgroup runs the gateway in a memory cgroup of its own with
// a 256 MiB limit: it takes 90% of that, and its bounds follow. It needs a
// writable cgroup v1 memory hierarchy (root, as in CI here).
func TestMemoryLimitCgroup(t *testing.T) {
	const root = "/sys/fs/cgroup/memory"
	dir := filepath.Join(root, fmt.Sprintf("lockgateway-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a memory cgroup (%v): needs root and cgroup v1's memory hierarchy at %s", err, root)
	}
	t.Cleanup(func() {
		// The gateway is killed by startGateway's cleanup, which runs first.
		for range 50 {
			if os.Remove(dir) == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	require.NoError(t, os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.Itoa(256<<20)), 0o644))

	g := startGateway(t, nil, "echo $$ > "+filepath.Join(dir, "cgroup.procs"))
	assert.Equal(t, "90% of the cgroup's 256.0 MiB", g.from)
	assert.InDelta(t, float64(256<<20)*0.9, g.memLimit, 100, "/metrics rounds to 8 digits")
	assert.Equal(t, 3686, g.maxConns)
	assert.Equal(t, 921, g.maxWaiting)
	assert.Equal(t, float64(400), g.gogc)
}
