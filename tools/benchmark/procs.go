package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lockgateway/lockgateway/internal/redistest"
)

// proc is a child process lockbench started: a redis-server, etcd, the
// baseline or a gateway. Its stdout and stderr go to files in the work dir.
type proc struct {
	name    string
	cmd     *exec.Cmd
	outPath string // stdout: the gateway's JSON log
	errPath string // stderr: where a SIGQUIT goroutine dump lands
	done    chan struct{}
	err     error // set before done closes
}

// startProc runs bin with args and env (added to lockbench's environment,
// minus any LOCKGW_ or OTEL_ variable, so the caller's shell cannot change
// what is measured).
func (b *bench) startProc(name, bin string, args, env []string) (*proc, error) {
	safe := strings.NewReplacer(" ", "-", "(", "", ")", "", "/", "-").Replace(name)
	for _, p := range b.procs {
		if p.name == name { // a retry after a failed start: keep both logs
			safe += fmt.Sprintf("-%d", len(b.procs))
			break
		}
	}
	p := &proc{
		name:    name,
		outPath: filepath.Join(b.dir, safe+".out"),
		errPath: filepath.Join(b.dir, safe+".err"),
		done:    make(chan struct{}),
	}
	stdout, err := os.Create(p.outPath)
	if err != nil {
		return nil, err
	}
	stderr, err := os.Create(p.errPath)
	if err != nil {
		_ = stdout.Close()
		return nil, err
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = stdout, stderr
	p.cmd.Env = append(cleanEnv(), env...)
	// Children die with lockbench even when it is killed outright.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		_ = stdout.Close()
		_ = stderr.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		_ = stdout.Close()
		_ = stderr.Close()
		close(p.done)
	}()
	b.procs = append(b.procs, p)
	return p, nil
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOCKGW_") && !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks the process to end (SIGTERM) and kills it after 5 s.
func (p *proc) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail is the end of the process's output, for error messages.
func (p *proc) tail() string {
	var parts []string
	for _, path := range []string{p.outPath, p.errPath} {
		b, _ := os.ReadFile(path)
		if len(b) > 1500 {
			b = b[len(b)-1500:]
		}
		if s := strings.TrimSpace(string(b)); s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "\n")
}

// failed describes a process that did not become ready.
func (p *proc) failed(err error) error {
	if p.exited() {
		return fmt.Errorf("%s exited (%v): %s", p.name, p.err, p.tail())
	}
	return fmt.Errorf("%s: %w; its output so far: %s", p.name, err, p.tail())
}

// rssKiB reads the process's resident set size and its peak (VmRSS and
// VmHWM in /proc/<pid>/status), in KiB.
func (p *proc) rssKiB() (rss, peak int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc status %s: %q", name, value)
		}
		if name == "VmRSS" {
			rss = n
		} else {
			peak = n
		}
	}
	return rss, peak, sc.Err()
}

// runtimeStats are the gateway's Go runtime figures from its /metrics.
type runtimeStats struct {
	goroutines int
	heapMiB    float64 // allocated heap, garbage not yet collected included
}

// scrapeRuntime reads go_goroutines and go_memstats_heap_alloc_bytes from
// the gateway's Prometheus /metrics (on by default).
func scrapeRuntime(ctx context.Context, addr string) (runtimeStats, error) {
	const goroutines, heap = "go_goroutines", "go_memstats_heap_alloc_bytes"
	v, err := scrapeMetrics(ctx, addr, goroutines, heap)
	if err != nil {
		return runtimeStats{}, err
	}
	return runtimeStats{goroutines: int(v[goroutines]), heapMiB: v[heap] / (1 << 20)}, nil
}

// scrapeMetrics reads the named unlabelled series from the gateway's
// /metrics, without a Prometheus library: the text format is one
// "name value" per line. A name missing is an error.
func scrapeMetrics(ctx context.Context, addr string, names ...string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Close = true // leave no connection (and no server goroutine) behind
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, name := range names {
		if _, ok := out[name]; !ok {
			return nil, fmt.Errorf("/metrics lacks %s", name)
		}
	}
	return out, nil
}

// startRedis starts a redis-server without persistence on a free loopback
// port and returns its address once it answers PING. Its output goes to
// <name>.out in the work dir.
func (b *bench) startRedis(name string) (string, error) {
	safe := strings.NewReplacer(" ", "-", "(", "", ")", "", "/", "-").Replace(name)
	dir := filepath.Join(b.dir, safe)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out, err := os.Create(filepath.Join(b.dir, safe+".out"))
	if err != nil {
		return "", err
	}
	b.logs = append(b.logs, out)
	srv, err := redistest.Run(redistest.Options{Bin: b.redisBin, Dir: dir, Output: out, DieWithParent: true})
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	b.redisServers = append(b.redisServers, srv)
	return srv.Addr(), nil
}

// waitHTTP waits until url answers 200, or gone reports that the server
// is gone.
func waitHTTP(ctx context.Context, gone func() bool, url string) error {
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	return waitFor(ctx, gone, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	})
}

// waitFor polls ready for up to 15 s and returns its last error; gone
// reporting true ends the wait early.
func waitFor(ctx context.Context, gone func() bool, ready func(context.Context) error) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		callCtx, cancel := context.WithTimeout(ctx, time.Second)
		err := ready(callCtx)
		cancel()
		if err == nil {
			return nil
		}
		if gone() || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// commandOutput runs a short command (a version query) and returns its
// first line, or "" when it fails.
func commandOutput(bin string, args ...string) string {
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		return ""
	}
	line, _, _ := bytes.Cut(out, []byte("\n"))
	return strings.TrimSpace(string(line))
}
