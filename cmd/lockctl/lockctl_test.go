package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/client"
	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/tools/chaos"
)

type result struct {
	code           int
	stdout, stderr string
}

// lockctl calls run as main does, with no stdin.
func lockctl(t testing.TB, url string, args ...string) result {
	t.Helper()
	var stdout, stderr apitest.SyncBuffer // the child writes to them too
	code := run(context.Background(), append([]string{"--url", url}, args...), nil, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// runsCommands skips, under go test -short, a test that runs the system's
// commands (sh, sleep, env) under lockctl run: that layer needs nothing
// but Go (CONTRIBUTING.md, "Tests"); make test runs it.
func runsCommands(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs sh and other system commands: runs in make test, not with -short")
	}
}

func memoryGateway(t testing.TB) *apitest.Gateway {
	return apitest.Start(t, map[string]string{"LOCKGW_BACKEND": "memory"})
}

func newClient(t testing.TB, url string) *client.Client {
	t.Helper()
	c, err := client.New(url)
	require.NoError(t, err)
	return c
}

// waitHeld waits until key is held and returns the holder's fence.
func waitHeld(t testing.TB, c *client.Client, key string) int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if info, err := c.Inspect(context.Background(), key); err == nil {
			return info.Fence
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s was not taken within 10s", key)
	return 0
}

func readEnv(t testing.TB, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	env := map[string]string{}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			env[k] = v
		}
	}
	return env
}

func TestCommands(t *testing.T) {
	g := memoryGateway(t)
	key := "jobs/" + strings.ReplaceAll(apitest.Key(t), "/", "-")

	r := lockctl(t, g.URL, "acquire", "--json", "--ttl", "10s", "--owner", "cron@host-1", key)
	require.Equal(t, exitOK, r.code, r.stderr)
	var lease jsonLease
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &lease), r.stdout)
	assert.Equal(t, key, lease.Key)
	assert.Equal(t, "cron@host-1", lease.Owner)
	assert.EqualValues(t, 10000, lease.TTLMs)
	assert.Positive(t, lease.Fence)

	// status: held, exit 0; never the token.
	r = lockctl(t, g.URL, "status", "--json", key)
	require.Equal(t, exitOK, r.code, r.stderr)
	var st map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	assert.Equal(t, true, st["held"])
	assert.Equal(t, "cron@host-1", st["owner"])
	assert.EqualValues(t, lease.Fence, st["fence"])
	assert.NotContains(t, r.stdout, lease.Token)
	r = lockctl(t, g.URL, "status", key)
	assert.Equal(t, exitOK, r.code)
	assert.Contains(t, r.stdout, key+": held by cron@host-1, fence "+strconv.FormatInt(lease.Fence, 10))

	// Held: 75, with the problem in the JSON output; and after a wait.
	r = lockctl(t, g.URL, "acquire", "--json", key)
	assert.Equal(t, exitNotAcquired, r.code)
	assert.Contains(t, r.stdout, `"problem_type":"lock-held"`)
	assert.Contains(t, r.stderr, "retry after")
	start := time.Now()
	r = lockctl(t, g.URL, "acquire", "--wait", "300ms", key)
	assert.Equal(t, exitNotAcquired, r.code)
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	assert.NotContains(t, r.stderr, "waiting for", "no progress line when stderr is not a terminal")

	// extend, with the token in --token, then in $LOCK_TOKEN.
	r = lockctl(t, g.URL, "extend", "--json", "--ttl", "20s", "--token", lease.Token, key)
	require.Equal(t, exitOK, r.code, r.stderr)
	var ext jsonLease
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ext))
	assert.Equal(t, lease.Fence, ext.Fence)
	assert.EqualValues(t, 20000, ext.TTLMs)
	t.Setenv("LOCK_TOKEN", lease.Token)
	r = lockctl(t, g.URL, "extend", key)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "LOCK_FENCE="+strconv.FormatInt(lease.Fence, 10)+"\n")

	// Someone else's token: 76, the lock stays.
	r = lockctl(t, g.URL, "release", "--token", "someone-elses-token-000000", key)
	assert.Equal(t, exitLost, r.code)
	assert.Equal(t, exitOK, lockctl(t, g.URL, "status", key).code)

	r = lockctl(t, g.URL, "release", key) // $LOCK_TOKEN
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "released "+key+"\n", r.stdout)
	r = lockctl(t, g.URL, "release", key)
	assert.Equal(t, exitLost, r.code, "not held any more")
	r = lockctl(t, g.URL, "extend", key)
	assert.Equal(t, exitLost, r.code)
	r = lockctl(t, g.URL, "status", "--json", key)
	assert.Equal(t, exitFree, r.code)
	assert.JSONEq(t, `{"key":"`+key+`","held":false}`, r.stdout)

	// Text output is exported shell assignments (TestShellFlow evals them).
	r = lockctl(t, g.URL, "acquire", key, "--ttl", "1s") // flags after KEY too
	require.Equal(t, exitOK, r.code, r.stderr)
	env := map[string]string{}
	for line := range strings.Lines(r.stdout) {
		assign, ok := strings.CutPrefix(strings.TrimSpace(line), "export ")
		require.True(t, ok, line)
		k, v, ok := strings.Cut(assign, "=")
		require.True(t, ok, line)
		env[k] = v
	}
	assert.Equal(t, key, env["LOCK_KEY"])
	assert.NotEmpty(t, env["LOCK_TOKEN"])
	fence, err := strconv.ParseInt(env["LOCK_FENCE"], 10, 64)
	require.NoError(t, err)
	assert.Greater(t, fence, lease.Fence)
	assert.NotEmpty(t, env["LOCK_EXPIRES_AT"])
}

func TestExitCodes(t *testing.T) {
	g := memoryGateway(t)
	cases := []struct {
		name string
		url  string
		args []string
		want int
	}{
		{"no command", g.URL, nil, exitUsage},
		{"unknown command", g.URL, []string{"grab", "k"}, exitUsage},
		{"no key", g.URL, []string{"acquire"}, exitUsage},
		{"two keys", g.URL, []string{"status", "a", "b"}, exitUsage},
		{"bad duration", g.URL, []string{"acquire", "--ttl", "soon", "k"}, exitUsage},
		{"unknown flag", g.URL, []string{"status", "--frobnicate", "k"}, exitUsage},
		{"release without token", g.URL, []string{"release", "k"}, exitUsage},
		{"run without --", g.URL, []string{"run", "k", "true"}, exitUsage},
		{"run without command", g.URL, []string{"run", "k", "--"}, exitUsage},
		{"bad URL", "localhost:8080", []string{"status", "k"}, exitUsage},
		{"bad key", g.URL, []string{"acquire", "a//b"}, exitInvalid},
		{"TTL out of range", g.URL, []string{"acquire", "--ttl", "5ms", "k"}, exitInvalid},
		{"unreachable", "http://127.0.0.1:1", []string{"acquire", "k"}, exitUnavailable},
		{"run unreachable", "http://127.0.0.1:1", []string{"run", "k", "--", "true"}, exitUnavailable},
		{"help", g.URL, []string{"help"}, exitOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("LOCK_TOKEN", "")
			r := lockctl(t, tc.url, tc.args...)
			assert.Equal(t, tc.want, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
		})
	}
}

// TestRunOutlivesTheTTL: a command that runs for three TTLs keeps the lock,
// with one fence, and sees it in its environment; the lock is free when
// lockctl returns.
func TestRunOutlivesTheTTL(t *testing.T) {
	runsCommands(t)
	g := memoryGateway(t)
	c := newClient(t, g.URL)
	key := apitest.Key(t)
	envFile := filepath.Join(t.TempDir(), "env")

	done := make(chan result, 1)
	go func() {
		done <- lockctl(t, g.URL, "run", "--ttl", "300ms", key, "--",
			"sh", "-c", `env > "$1.tmp" && mv "$1.tmp" "$1"; sleep 1; echo done`, "sh", envFile)
	}()
	fence := waitHeld(t, c, key)
	// For most of the second the command runs, the lock must stay held,
	// by the same holder.
	for end := time.Now().Add(800 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		info, err := c.Inspect(t.Context(), key)
		require.NoError(t, err, "the lock was lost while the command ran")
		require.Equal(t, fence, info.Fence)
	}
	r := <-done
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "done\n", r.stdout)

	env := readEnv(t, envFile)
	assert.Equal(t, key, env["LOCK_KEY"])
	assert.Equal(t, strconv.FormatInt(fence, 10), env["LOCK_FENCE"])
	assert.GreaterOrEqual(t, len(env["LOCK_TOKEN"]), 22)
	_, err := c.Inspect(t.Context(), key)
	require.ErrorIs(t, err, client.ErrNotHeld, "released when the command exited")
}

func TestRunStatus(t *testing.T) {
	runsCommands(t)
	g := memoryGateway(t)
	c := newClient(t, g.URL)

	t.Run("exit code passes through", func(t *testing.T) {
		key := apitest.Key(t)
		r := lockctl(t, g.URL, "run", key, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
		assert.Equal(t, 3, r.code)
		assert.Equal(t, "out\n", r.stdout)
		assert.Equal(t, "err\n", r.stderr)
		_, err := c.Inspect(t.Context(), key)
		require.ErrorIs(t, err, client.ErrNotHeld)
	})
	t.Run("killed by a signal", func(t *testing.T) {
		r := lockctl(t, g.URL, "run", apitest.Key(t), "--", "sh", "-c", "kill -KILL $$")
		assert.Equal(t, 128+int(syscall.SIGKILL), r.code)
	})
	t.Run("command not found", func(t *testing.T) {
		key := apitest.Key(t)
		r := lockctl(t, g.URL, "run", key, "--", "no-such-command-lockctl-test")
		assert.Equal(t, exitNotFound, r.code, r.stderr)
		_, err := c.Inspect(t.Context(), key)
		require.ErrorIs(t, err, client.ErrNotHeld, "released")
	})
	t.Run("not acquired", func(t *testing.T) {
		key := apitest.Key(t)
		_, err := c.Acquire(t.Context(), key, client.AcquireOptions{TTL: 10 * time.Second})
		require.NoError(t, err)
		marker := filepath.Join(t.TempDir(), "ran")
		r := lockctl(t, g.URL, "run", key, "--", "touch", marker)
		assert.Equal(t, exitNotAcquired, r.code)
		assert.NoFileExists(t, marker, "the command must not run without the lock")
	})
	t.Run("waits for the lock", func(t *testing.T) {
		key := apitest.Key(t)
		held, err := c.Acquire(t.Context(), key, client.AcquireOptions{TTL: 10 * time.Second})
		require.NoError(t, err)
		time.AfterFunc(200*time.Millisecond, func() { _ = c.Release(context.Background(), key, held.Token) })
		envFile := filepath.Join(t.TempDir(), "env")
		r := lockctl(t, g.URL, "run", "--wait", "5s", key, "--", "sh", "-c", `env > "$1"`, "sh", envFile)
		require.Equal(t, 0, r.code, r.stderr)
		fence, err := strconv.ParseInt(readEnv(t, envFile)["LOCK_FENCE"], 10, 64)
		require.NoError(t, err)
		assert.Greater(t, fence, held.Fence)
	})
}

func redisGateway(t testing.TB) (*apitest.Gateway, *redistest.Server) {
	srv := redistest.Start(t)
	return apitest.Start(t, map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_URL": srv.URL()}), srv
}

// TestRunLockLost deletes the lock from Redis while `sleep 30` runs under
// it: the gateway finds it gone (at its next renewal, or through its
// watch of the key) and ends the hold's stream; lockctl terminates the
// command then, within the TTL, and exits 76.
func TestRunLockLost(t *testing.T) {
	runsCommands(t)
	g, srv := redisGateway(t)
	c := newClient(t, g.URL)
	key := apitest.Key(t)
	const ttl = 3 * time.Second

	done := make(chan result, 1)
	go func() { done <- lockctl(t, g.URL, "run", "--ttl", ttl.String(), key, "--", "sleep", "30") }()
	waitHeld(t, c, key)
	require.NoError(t, srv.Client().Del(t.Context(), "lockgw:{"+key+"}:lock").Err())
	deleted := time.Now()
	var r result
	select {
	case r = <-done:
	case <-time.After(2 * ttl):
		t.Fatal("lockctl still running 2 TTLs after its lock was deleted")
	}
	took := time.Since(deleted)
	t.Logf("sleep 30 terminated and lockctl exited %v after the lock was deleted (TTL %v, renewals every %v)", took, ttl, ttl/3)
	assert.Equal(t, exitLost, r.code, r.stderr)
	assert.Less(t, took, ttl, "terminated within the TTL")
	assert.Contains(t, r.stderr, "lock lost")
	assert.Contains(t, r.stderr, "SIGTERM")
	assert.Contains(t, r.stderr, "exited with status 143")
}

// TestRunGrace: a command that ignores SIGTERM (and so do its children) gets
// SIGKILL after --grace.
func TestRunGrace(t *testing.T) {
	runsCommands(t)
	g, srv := redisGateway(t)
	c := newClient(t, g.URL)
	key := apitest.Key(t)
	const ttl, grace = time.Second, 300 * time.Millisecond

	done := make(chan result, 1)
	go func() {
		done <- lockctl(t, g.URL, "run", "--ttl", ttl.String(), "--grace", grace.String(), key, "--",
			"sh", "-c", `trap "" TERM; sleep 30`)
	}()
	waitHeld(t, c, key)
	require.NoError(t, srv.Client().Del(t.Context(), "lockgw:{"+key+"}:lock").Err())
	deleted := time.Now()
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("lockctl did not kill a command that ignores SIGTERM")
	}
	took := time.Since(deleted)
	t.Logf("a command ignoring SIGTERM was killed %v after the lock was deleted (TTL %v, grace %v)", took, ttl, grace)
	assert.Equal(t, exitLost, r.code, r.stderr)
	assert.GreaterOrEqual(t, took, grace)
	assert.Less(t, took, ttl+grace)
	assert.Contains(t, r.stderr, "SIGKILL")
	assert.Contains(t, r.stderr, "exited with status 137")
}

// buildLockctl builds the command for the tests that signal it.
func buildLockctl(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "lockctl")
	out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// waitFile waits until path exists.
func waitFile(t testing.TB, path string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Fatalf("%s did not appear in 10s", path)
}

// waitStarted waits for COMMAND's file at path, unless lockctl (its
// result on done) ends first: then it fails with lockctl's output.
func waitStarted(t testing.TB, path string, done <-chan result) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case r := <-done:
			t.Fatalf("lockctl exited %d before COMMAND started:\n%s", r.code, r.stderr)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("%s did not appear in 10s", path)
}

// TestSignals runs the built binary: SIGTERM and SIGINT reach the command,
// whose status lockctl passes on, and the lock is released; a signal while
// waiting for the lock ends lockctl with 128+signal.
func TestSignals(t *testing.T) {
	runsCommands(t)
	bin := buildLockctl(t)
	g := memoryGateway(t)
	c := newClient(t, g.URL)

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run("forwarded "+sig.String(), func(t *testing.T) {
			key := apitest.Key(t)
			dir := t.TempDir()
			ready, got := filepath.Join(dir, "ready"), filepath.Join(dir, "got")
			script := `trap 'echo TERM > "$2"; exit 7' TERM; trap 'echo INT > "$2"; exit 8' INT; : > "$1"; while :; do sleep 0.05; done`
			cmd := exec.Command(bin, "--url", g.URL, "run", key, "--", "sh", "-c", script, "sh", ready, got)
			require.NoError(t, cmd.Start())
			waitFile(t, ready)
			require.NoError(t, cmd.Process.Signal(sig))
			err := cmd.Wait()
			want, name := 7, "TERM"
			if sig == syscall.SIGINT {
				want, name = 8, "INT"
			}
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit)
			assert.Equal(t, want, exit.ExitCode())
			b, err := os.ReadFile(got)
			require.NoError(t, err)
			assert.Equal(t, name+"\n", string(b))
			_, err = c.Inspect(t.Context(), key)
			require.ErrorIs(t, err, client.ErrNotHeld, "released")
		})
	}

	t.Run("while waiting", func(t *testing.T) {
		key := apitest.Key(t)
		_, err := c.Acquire(t.Context(), key, client.AcquireOptions{TTL: 10 * time.Second})
		require.NoError(t, err)
		marker := filepath.Join(t.TempDir(), "ran")
		cmd := exec.Command(bin, "--url", g.URL, "run", "--wait", "30s", key, "--", "touch", marker)
		require.NoError(t, cmd.Start())
		time.Sleep(300 * time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
		err = cmd.Wait()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		assert.Equal(t, 128+int(syscall.SIGINT), exit.ExitCode())
		assert.NoFileExists(t, marker)
	})
}

// TestShellFlow runs docs/clients.md's lockctl flow in real shells with the built binary:
// eval "$(lockctl acquire …)" must leave LOCK_TOKEN where the next lockctl
// (a child of the shell) finds it, so extend and release need no --token.
func TestShellFlow(t *testing.T) {
	runsCommands(t)
	bin := buildLockctl(t)
	g := memoryGateway(t)
	c := newClient(t, g.URL)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOCK_") && !strings.HasPrefix(kv, "LOCKGW_") {
			env = append(env, kv)
		}
	}
	env = append(env, "LOCKGW_URL="+g.URL, "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
	script := `set -e
eval "$(lockctl acquire --ttl 5m "$1")"
test "$LOCK_KEY" = "$1"
lockctl extend --ttl 5m "$1" > /dev/null
lockctl status "$1"
lockctl release "$1"
`
	for _, shell := range []string{"bash", "sh"} {
		t.Run(shell, func(t *testing.T) {
			path, err := exec.LookPath(shell)
			if err != nil {
				t.Skipf("no %s: %v", shell, err)
			}
			key := apitest.Key(t)
			cmd := exec.Command(path, "-c", script, shell, key)
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			assert.Contains(t, string(out), key+": held by ")
			assert.Contains(t, string(out), "released "+key+"\n")
			_, err = c.Inspect(t.Context(), key)
			require.ErrorIs(t, err, client.ErrNotHeld, "released")
		})
	}
}

// TestShellQuote: what acquire prints is read back by a shell as it was.
func TestShellQuote(t *testing.T) {
	runsCommands(t)
	for _, s := range []string{"", "jobs/nightly", "2026-11-24T12:00:00.5Z", "a b", "it's", `$(touch x)`, "`x`", `a\b"c`, "new\nline", "*?[]~#!&;|<>{}"} {
		out, err := exec.Command("sh", "-c", "eval \"v=$1\"; printf %s \"$v\"", "sh", shellQuote(s)).Output()
		require.NoError(t, err, s)
		assert.Equal(t, s, string(out), "quoted as %s", shellQuote(s))
	}
	assert.Equal(t, "jobs/nightly", shellQuote("jobs/nightly"), "safe values stay unquoted")
}

// TestRunWaitLongerThanTTL: run --wait for a lock held longer than --ttl
// runs the command once it gets the lock, and keeps the lock while the
// command runs: the lease is counted from the grant, not from before the
// wait.
func TestRunWaitLongerThanTTL(t *testing.T) {
	runsCommands(t)
	g := memoryGateway(t)
	c := newClient(t, g.URL)
	key := apitest.Key(t)
	held, err := c.Acquire(t.Context(), key, client.AcquireOptions{TTL: 10 * time.Second})
	require.NoError(t, err)
	time.AfterFunc(1500*time.Millisecond, func() { _ = c.Release(context.Background(), key, held.Token) })
	envFile := filepath.Join(t.TempDir(), "env")
	r := lockctl(t, g.URL, "run", "--wait", "10s", "--ttl", "500ms", key, "--",
		"sh", "-c", `env > "$1"; sleep 1.2; echo done`, "sh", envFile)
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Equal(t, "done\n", r.stdout)
	fence, err := strconv.ParseInt(readEnv(t, envFile)["LOCK_FENCE"], 10, 64)
	require.NoError(t, err)
	assert.Greater(t, fence, held.Fence)
	_, err = c.Inspect(t.Context(), key)
	require.ErrorIs(t, err, client.ErrNotHeld, "released when the command exited")
}

// TestCronRunsTheJobOnce is the cron recipe of docs/clients.md, run as two
// hosts whose cron fires a second apart: the job runs once, the second
// host exits 75 without a word (cron would mail any output), and the lock
// stays held for --hold-at-least after the job.
func TestCronRunsTheJobOnce(t *testing.T) {
	runsCommands(t)
	g := memoryGateway(t)
	c := newClient(t, g.URL)
	key := apitest.Key(t)
	ran := filepath.Join(t.TempDir(), "ran")
	job := []string{"run", "--quiet", "--hold-at-least", "3s", key, "--", "sh", "-c", `echo "$LOCK_FENCE" >> "$1"`, "sh", ran}

	first := lockctl(t, g.URL, job...)
	require.Equal(t, 0, first.code, first.stderr)
	time.Sleep(time.Second) // the second host's cron fires a second later
	second := lockctl(t, g.URL, job...)
	assert.Equal(t, 75, second.code, "the second host does not get the lock")
	assert.Empty(t, second.stdout+second.stderr, "--quiet: nothing for cron to mail")

	b, err := os.ReadFile(ran)
	require.NoError(t, err)
	assert.Len(t, strings.Fields(string(b)), 1, "the job ran once: %q", b)
	_, err = c.Inspect(t.Context(), key)
	require.NoError(t, err, "held at least 3 s after the grant")

	// Without --hold-at-least, the same recipe runs the job twice.
	key2 := key + "-plain"
	plain := []string{"run", "--quiet", key2, "--", "sh", "-c", `echo x >> "$1"`, "sh", ran + "-plain"}
	require.Equal(t, 0, lockctl(t, g.URL, plain...).code)
	time.Sleep(time.Second)
	require.Equal(t, 0, lockctl(t, g.URL, plain...).code, "the control: released at once, so the second host runs it again")
	b, err = os.ReadFile(ran + "-plain")
	require.NoError(t, err)
	assert.Len(t, strings.Fields(string(b)), 2)
}

// TestEvalExamples runs docs/clients.md's two `set -e` scripts (the sh
// blocks after "**`acquire` in a script.**") in bash and sh with the built
// binary: with the lock free they do the work; with it held the first
// stops at the eval with status 75, and the second says so and exits 0.
// Neither goes on with a LOCK_TOKEN left from before.
func TestEvalExamples(t *testing.T) {
	doc, err := os.ReadFile("../../docs/clients.md")
	require.NoError(t, err)
	section := string(doc)[strings.Index(string(doc), "**`acquire` in a script.**"):]
	var scripts []string
	for rest := section; len(scripts) < 2; {
		start := strings.Index(rest, "```sh\n")
		require.GreaterOrEqual(t, start, 0, "docs/clients.md: two sh blocks after the eval paragraph")
		rest = rest[start+len("```sh\n"):]
		end := strings.Index(rest, "```")
		scripts = append(scripts, rest[:end])
		rest = rest[end+3:]
	}

	bin := buildLockctl(t)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOCK_") && !strings.HasPrefix(kv, "LOCKGW_") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"), "LOCK_TOKEN=stale-token-of-an-earlier-lease")
	for _, shell := range []string{"bash", "sh"} {
		path, err := exec.LookPath(shell)
		if err != nil {
			t.Logf("no %s: %v", shell, err)
			continue
		}
		for i, script := range scripts {
			for _, held := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/script%d/held=%v", shell, i+1, held), func(t *testing.T) {
					g := memoryGateway(t)
					if held {
						_, err := newClient(t, g.URL).Acquire(t.Context(), "jobs/nightly", client.AcquireOptions{TTL: time.Minute})
						require.NoError(t, err)
					}
					cmd := exec.Command(path, "-c", script+"\necho \"went on with LOCK_TOKEN=$LOCK_TOKEN\"\n")
					cmd.Env = append(slices.Clone(env), "LOCKGW_URL="+g.URL)
					out, err := cmd.CombinedOutput()
					code := 0
					if e, ok := err.(*exec.ExitError); ok {
						code = e.ExitCode()
					} else {
						require.NoError(t, err)
					}
					switch {
					case !held:
						assert.Equal(t, 0, code, "%s", out)
						assert.Contains(t, string(out), "working with fence ")
						assert.Contains(t, string(out), "released jobs/nightly")
					case i == 0:
						assert.Equal(t, exitNotAcquired, code, "%s", out)
						assert.NotContains(t, string(out), "working")
						assert.NotContains(t, string(out), "went on")
					default:
						assert.Equal(t, 0, code, "%s", out)
						assert.Contains(t, string(out), "not acquired (75), skipping")
						assert.NotContains(t, string(out), "working")
					}
					assert.NotContains(t, string(out), "stale-token", "an earlier lease's token is never used")
				})
			}
		}
	}
}

// TestAcquireFailurePrintsAFailingStatement: what a failed acquire prints
// for eval, and that it prints nothing with --json.
func TestAcquireFailurePrintsAFailingStatement(t *testing.T) {
	g := memoryGateway(t)
	key := apitest.Key(t)
	_, err := newClient(t, g.URL).Acquire(t.Context(), key, client.AcquireOptions{TTL: time.Minute})
	require.NoError(t, err)
	r := lockctl(t, g.URL, "acquire", key)
	assert.Equal(t, exitNotAcquired, r.code)
	assert.Equal(t, "unset LOCK_KEY LOCK_TOKEN LOCK_FENCE LOCK_EXPIRES_AT; (exit 75)\n", r.stdout)
	r = lockctl(t, g.URL, "acquire", "bad key")
	assert.Equal(t, exitInvalid, r.code)
	assert.Equal(t, "unset LOCK_KEY LOCK_TOKEN LOCK_FENCE LOCK_EXPIRES_AT; (exit 65)\n", r.stdout)
	r = lockctl(t, g.URL, "acquire")
	assert.Equal(t, exitUsage, r.code)
	assert.Equal(t, "unset LOCK_KEY LOCK_TOKEN LOCK_FENCE LOCK_EXPIRES_AT; (exit 64)\n", r.stdout)
	r = lockctl(t, g.URL, "--json", "acquire", key)
	assert.Equal(t, exitNotAcquired, r.code)
	assert.NotContains(t, r.stdout, "unset")
}

// TestUnauthorizedNamesTheVariable: on a 401, lockctl says to set
// LOCKGW_API_KEY, or that the key in it is not accepted.
func TestUnauthorizedNamesTheVariable(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.json")
	sum := sha256.Sum256([]byte("the-right-key"))
	require.NoError(t, os.WriteFile(keys, []byte(`{"users":[{"user":"ops","key_sha256":"`+hex.EncodeToString(sum[:])+`","prefixes":["*"]}]}`), 0o600))
	g := apitest.Start(t, map[string]string{"LOCKGW_API_KEYS_FILE": keys})

	t.Setenv("LOCKGW_API_KEY", "")
	r := lockctl(t, g.URL, "status", "jobs/nightly")
	assert.Equal(t, exitNoPerm, r.code)
	assert.Contains(t, r.stderr, "set LOCKGW_API_KEY to yours")

	t.Setenv("LOCKGW_API_KEY", "a-wrong-key")
	r = lockctl(t, g.URL, "status", "jobs/nightly")
	assert.Equal(t, exitNoPerm, r.code)
	assert.Contains(t, r.stderr, "does not accept the key in LOCKGW_API_KEY")

	t.Setenv("LOCKGW_API_KEY", "the-right-key")
	r = lockctl(t, g.URL, "status", "jobs/nightly")
	assert.Equal(t, exitFree, r.code, r.stderr)
}

// processGone reports whether pid has exited (a zombie has).
func processGone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return runtime.GOOS == "linux" // gone between the two looks
	}
	// pid (comm) state …: the state follows the last ')'.
	_, rest, ok := strings.Cut(string(b[bytes.LastIndexByte(b, ')')+1:]), " ")
	return ok && strings.HasPrefix(rest, "Z")
}

// readPids reads the space-separated process ids a script wrote to path.
func readPids(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	require.NotEmpty(t, pids)
	return pids
}

// TestRunStopsTheCommandWhenLost: Redis is paused, so the gateway cannot
// renew the lease; its stream says lost (backend-unavailable) before the
// lease ends, and lockctl sends SIGTERM to COMMAND's process group (the
// script and the sleep it started) at once and exits 76, all before the
// lease could end and another holder could take the key.
func TestRunStopsTheCommandWhenLost(t *testing.T) {
	runsCommands(t)
	srv := redistest.Start(t)
	g := apitest.Start(t, map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_URL": srv.URL(), "LOCKGW_BACKEND_TIMEOUT": "200ms"})
	key := apitest.Key(t)
	const ttl = 2 * time.Second
	dir := t.TempDir()
	pids, ready := filepath.Join(dir, "pids"), filepath.Join(dir, "ready")

	done := make(chan result, 1)
	go func() {
		// --wait: a 503 from the short backend timeout, on a loaded
		// machine, is retried as the acquire of a lockctl user would be.
		done <- lockctl(t, g.URL, "run", "--ttl", ttl.String(), "--wait", "10s", key, "--",
			"sh", "-c", `sleep 30 & echo "$$ $!" > "$1"; : > "$2"; wait`, "sh", pids, ready)
	}()
	waitStarted(t, ready, done)
	srv.Pause()
	defer srv.Resume()
	paused := time.Now()
	var r result
	select {
	case r = <-done:
	case <-time.After(3 * ttl):
		t.Fatal("lockctl still running 3 TTLs after Redis was paused")
	}
	took := time.Since(paused)
	t.Logf("the command was terminated and lockctl exited %v after Redis was paused (TTL %v)\n%s", took, ttl, r.stderr)
	assert.Equal(t, exitLost, r.code)
	assert.Contains(t, r.stderr, "lost (backend-unavailable)", "the gateway's lost")
	assert.Contains(t, r.stderr, "sending SIGTERM")
	assert.Contains(t, r.stderr, "exited with status 143")
	assert.Less(t, took, ttl, "before the lease could end")
	for _, pid := range readPids(t, pids) {
		assert.Eventually(t, func() bool { return processGone(pid) }, 5*time.Second, 10*time.Millisecond,
			"process %d of COMMAND's group is gone", pid)
	}
}

// TestRunStopsTheCommandWhenTheGatewayDies: the gateway process is killed,
// its stream breaks, and lockctl terminates the command at once rather
// than at the lease's end.
func TestRunStopsTheCommandWhenTheGatewayDies(t *testing.T) {
	runsCommands(t)
	bin, err := chaos.BuildGateway(t.TempDir())
	require.NoError(t, err)
	g := chaos.StartGateway(t, bin, map[string]string{"LOCKGW_BACKEND": "memory"})
	key := apitest.Key(t)
	const ttl = 5 * time.Second
	ready := filepath.Join(t.TempDir(), "ready")

	done := make(chan result, 1)
	go func() {
		done <- lockctl(t, g.URL, "run", "--ttl", ttl.String(), key, "--", "sh", "-c", `: > "$1"; exec sleep 30`, "sh", ready)
	}()
	waitStarted(t, ready, done)
	g.Kill()
	killed := time.Now()
	var r result
	select {
	case r = <-done:
	case <-time.After(2 * ttl):
		t.Fatal("lockctl still running 2 TTLs after the gateway died")
	}
	took := time.Since(killed)
	t.Logf("lockctl exited %v after the gateway was killed (TTL %v)\n%s", took, ttl, r.stderr)
	assert.Equal(t, exitLost, r.code)
	assert.Contains(t, r.stderr, "stream broke")
	assert.Contains(t, r.stderr, "exited with status 143")
	assert.Less(t, took, ttl/2, "at once, not at the lease's end")
}

// TestRunKilledReleasesAtOnce: lockctl killed with SIGKILL (it cannot
// release anything) closes its hold's stream by dying, and the gateway
// releases the lock at once, long before the TTL; on Linux the kernel
// kills COMMAND too.
func TestRunKilledReleasesAtOnce(t *testing.T) {
	runsCommands(t)
	bin := buildLockctl(t)
	g := memoryGateway(t)
	c := newClient(t, g.URL)
	key := apitest.Key(t)
	pidFile := filepath.Join(t.TempDir(), "pid")

	cmd := exec.Command(bin, "--url", g.URL, "run", "--ttl", "30s", key, "--", "sh", "-c", `echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; exec sleep 30`, "sh", pidFile)
	require.NoError(t, cmd.Start())
	waitFile(t, pidFile)
	waitHeld(t, c, key)
	require.NoError(t, cmd.Process.Kill())
	killed := time.Now()
	_ = cmd.Wait()
	require.Eventually(t, func() bool {
		_, err := c.Inspect(t.Context(), key)
		return errors.Is(err, client.ErrNotHeld)
	}, 5*time.Second, 10*time.Millisecond, "the key is free once lockctl's stream closed")
	t.Logf("free %v after lockctl was killed (TTL 30s)", time.Since(killed))
	if runtime.GOOS == "linux" {
		pid := readPids(t, pidFile)[0]
		assert.Eventually(t, func() bool { return processGone(pid) }, 5*time.Second, 10*time.Millisecond, "COMMAND killed with lockctl")
	}
}
