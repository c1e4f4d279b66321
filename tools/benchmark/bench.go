package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/redis"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/server"
)

// backendTimeout is the gateway's default LOCKGW_BACKEND_TIMEOUT; the
// direct lockstore row gives each call the same deadline.
const backendTimeout = time.Second

// bench owns everything a run starts. Services start when the first row
// that needs them runs and live until the end, so the rows share one
// Redis and one gateway and skipped rows cost nothing.
type bench struct {
	cfg    config
	stderr io.Writer
	dir    string // work dir: logs, Redis and etcd data, built binaries
	root   string // the module's root, found when something must be built

	redisBin     string
	etcdBin      string // "" when there is none
	procs        []*proc
	redisServers []*redistest.Server
	logs         []*os.File // the redis-servers' output

	built     bool
	redisAddr string
	gateway   *target // the gateway on redisAddr
	redlockGW *target
	traced    *target   // the gateway on redisAddr with tracing on (traced.go)
	sink      *spanSink // where the traced gateway's spans go
	baseline  string    // host:port
	etcd      string    // host:port of its client URL
	direct    *redis.Store
	// The Sentinel rows' set-up and gateways, by replica count (sentinel.go).
	sentinels   *redistest.Sentinels
	sentinelGWs map[int]*target
	// The Cluster rows' cluster and gateways, by whether the per-user cap
	// is on (cluster.go).
	cluster    *redistest.Cluster
	clusterGWs map[bool]*target
}

// target is a gateway being measured, and what lockbench saw of its
// process.
type target struct {
	name  string
	addr  string
	env   []string
	proc  *proc        // nil when the gateway runs in-process
	stop  func() error // in-process only
	stats processStats
}

func newBench(cfg config, stderr io.Writer) (*bench, error) {
	b := &bench{cfg: cfg, stderr: stderr}
	var err error
	if b.redisBin, err = redisBinary(cfg.redisServer); err != nil {
		return nil, err
	}
	b.etcdBin = etcdBinary(cfg.etcdBin)
	if b.dir, err = os.MkdirTemp("", "lockbench-"); err != nil {
		return nil, err
	}
	return b, nil
}

func redisBinary(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	bin, err := redistest.FindBinary()
	if err != nil {
		return "", errors.New("redis-server not found on PATH: install it (Debian: apt-get install redis-server; `make test` does it as root), " +
			"or point -redis-server or REDIS_SERVER at one")
	}
	return bin, nil
}

// etcdBinary is the etcd to compare with, or "" when there is none.
// Debian's etcd-server package installs /usr/bin/etcd.
func etcdBinary(flagValue string) string {
	switch flagValue {
	case "none":
		return ""
	case "":
		if bin, err := exec.LookPath("etcd"); err == nil {
			return bin
		}
		if _, err := os.Stat("/usr/bin/etcd"); err == nil {
			return "/usr/bin/etcd"
		}
		return ""
	}
	return flagValue
}

// moduleRoot is the directory of the go.mod lockbench runs in.
func (b *bench) moduleRoot() (string, error) {
	if b.root != "" {
		return b.root, nil
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the lockgateway module: run from the repository, or pass -gateway-bin, -baseline-bin and -lua-dir")
	}
	b.root = filepath.Dir(gomod)
	return b.root, nil
}

// build compiles the gateway and the baseline, unless given, once.
func (b *bench) build() error {
	if b.built {
		return nil
	}
	b.built = true
	var pkgs []string
	if b.cfg.gatewayBin == "" {
		pkgs = append(pkgs, "./cmd/lockgateway")
		b.cfg.gatewayBin = filepath.Join(b.dir, "lockgateway")
	}
	if b.cfg.baselineBin == "" {
		pkgs = append(pkgs, "./tools/benchmark/baseline")
		b.cfg.baselineBin = filepath.Join(b.dir, "baseline")
	}
	if b.cfg.luaDir == "" {
		root, err := b.moduleRoot()
		if err != nil {
			return err
		}
		b.cfg.luaDir = filepath.Join(root, "lockstore", "internal", "script", "lua")
	}
	if len(pkgs) == 0 {
		return nil
	}
	root, err := b.moduleRoot()
	if err != nil {
		return err
	}
	fmt.Fprintf(b.stderr, "lockbench: go build %s\n", strings.Join(pkgs, " "))
	cmd := exec.Command("go", append([]string{"build", "-o", b.dir + string(filepath.Separator)}, pkgs...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	return nil
}

func (b *bench) redis(ctx context.Context) (string, error) {
	if b.redisAddr == "" {
		addr, err := b.startRedis("redis")
		if err != nil {
			return "", err
		}
		b.redisAddr = addr
	}
	return b.redisAddr, nil
}

// gatewayEnv is the gateway's configuration: production defaults (info
// logs as JSON, rate limiting off) spelled out, so a default that changes
// shows up here.
// -gateway-env comes last: a variable given twice counts once, the last.
func (b *bench) gatewayEnv(addr string, backend ...string) []string {
	env := append([]string{
		"LOCKGW_ADDR=" + addr,
		"LOCKGW_LOG_LEVEL=info",
		"LOCKGW_LOG_FORMAT=json",
		"LOCKGW_RATE_LIMIT_WINDOW=0",
	}, backend...)
	if b.cfg.profileDir != "" {
		env = append(env, "LOCKGW_PPROF=true")
	}
	return append(env, b.cfg.gatewayEnv...)
}

func (b *bench) redisGateway(ctx context.Context) (*target, error) {
	if b.gateway == nil {
		addr, err := b.redis(ctx)
		if err != nil {
			return nil, err
		}
		t, err := b.startGateway(ctx, redisGatewayName, "LOCKGW_BACKEND=redis", "LOCKGW_REDIS_URL=redis://"+addr+"/0")
		if err != nil {
			return nil, err
		}
		b.gateway = t
	}
	return b.gateway, nil
}

// The gateways' process names, which key the rows' CPU time per process.
const redisGatewayName = "gateway (redis)"

func (b *bench) redlockGatewayName() string {
	return fmt.Sprintf("gateway (redlock-%d)", b.cfg.redlock)
}

func (b *bench) redlockGateway(ctx context.Context) (*target, error) {
	if b.redlockGW == nil {
		var urls []string
		for i := range b.cfg.redlock {
			addr, err := b.startRedis(fmt.Sprintf("redlock-%d", i+1))
			if err != nil {
				return nil, err
			}
			urls = append(urls, "redis://"+addr+"/0")
		}
		t, err := b.startGateway(ctx, b.redlockGatewayName(),
			"LOCKGW_BACKEND=redlock", "LOCKGW_REDLOCK_URLS="+strings.Join(urls, ","))
		if err != nil {
			return nil, err
		}
		b.redlockGW = t
	}
	return b.redlockGW, nil
}

// startGateway starts a gateway on a free port, waits for /readyz and
// notes its memory and goroutines before any load.
func (b *bench) startGateway(ctx context.Context, name string, backend ...string) (*target, error) {
	if b.cfg.inProcess {
		return b.startInProcessGateway(ctx, name, backend)
	}
	if err := b.build(); err != nil {
		return nil, err
	}
	port, err := redistest.LoopbackPort()
	if err != nil {
		return nil, err
	}
	t := &target{name: name, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	t.env = b.gatewayEnv(t.addr, backend...)
	if t.proc, err = b.startProc(name, b.cfg.gatewayBin, nil, t.env); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, t.proc.exited, "http://"+t.addr+"/readyz"); err != nil {
		return nil, t.proc.failed(err)
	}
	time.Sleep(100 * time.Millisecond) // let the readiness probe's connection close
	t.stats = processStats{Name: name}
	if rss, _, err := t.proc.rssKiB(); err == nil {
		t.stats.RSSStartMiB = mib(rss)
	}
	if rt, err := scrapeRuntime(ctx, t.addr); err == nil {
		t.stats.GoroutinesBefore, t.stats.HeapBeforeMiB = &rt.goroutines, &rt.heapMiB
	} else {
		fmt.Fprintf(b.stderr, "lockbench: %s: goroutines and heap n/a: %v\n", name, err)
	}
	return t, nil
}

// startInProcessGateway runs server.Run inside lockbench, its goroutines
// labelled role=gateway for the CPU profile. Memory and goroutines are then
// lockbench's own and are not reported.
func (b *bench) startInProcessGateway(ctx context.Context, name string, backend []string) (*target, error) {
	port, err := redistest.LoopbackPort()
	if err != nil {
		return nil, err
	}
	t := &target{name: name + " in-process", addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	t.env = b.gatewayEnv(t.addr, backend...)
	vars := map[string]string{}
	for _, kv := range t.env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	logFile, err := os.Create(filepath.Join(b.dir, strings.ReplaceAll(t.name, " ", "-")+".out"))
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go pprof.Do(runCtx, pprof.Labels("role", "gateway"), func(ctx context.Context) {
		done <- server.Run(ctx, nil, func(k string) string { return vars[k] }, logFile, logFile)
	})
	var runErr error
	gone := func() bool {
		select {
		case runErr = <-done:
			return true
		default:
			return false
		}
	}
	if err := waitHTTP(ctx, gone, "http://"+t.addr+"/readyz"); err != nil {
		cancel()
		_ = logFile.Close()
		return nil, fmt.Errorf("%s: %w (server.Run: %v)", t.name, err, runErr)
	}
	t.stop = func() error {
		cancel()
		err := <-done
		_ = logFile.Close()
		return err
	}
	t.stats = processStats{Name: t.name, InProcess: true}
	return t, nil
}

func (b *bench) baselineServer(ctx context.Context) (string, error) {
	if b.baseline != "" {
		return b.baseline, nil
	}
	if err := b.build(); err != nil {
		return "", err
	}
	redisAddr, err := b.redis(ctx)
	if err != nil {
		return "", err
	}
	port, err := redistest.LoopbackPort()
	if err != nil {
		return "", err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p, err := b.startProc("baseline", b.cfg.baselineBin, []string{
		"-addr", addr, "-redis-url", "redis://" + redisAddr + "/0", "-lua-dir", b.cfg.luaDir,
	}, nil)
	if err != nil {
		return "", err
	}
	if err := waitHTTP(ctx, p.exited, "http://"+addr+"/healthz"); err != nil {
		return "", p.failed(err)
	}
	b.baseline = addr
	return addr, nil
}

// directStore is a lockstore/redis.Store with the gateway's client settings
// (lockstore/redis.Open).
func (b *bench) directStore(ctx context.Context) (*redis.Store, error) {
	if b.direct == nil {
		addr, err := b.redis(ctx)
		if err != nil {
			return nil, err
		}
		b.direct, err = redis.Open("redis://"+addr+"/0", redis.Options{Timeout: backendTimeout})
		if err != nil {
			return nil, err
		}
	}
	return b.direct, nil
}

// etcdServer starts a single-node etcd with its defaults (a WAL fsynced on
// every commit, in the work directory on disk).
func (b *bench) etcdServer(ctx context.Context) (string, error) {
	if b.etcd != "" {
		return b.etcd, nil
	}
	var lastErr error
	for range 3 {
		cport, err := redistest.LoopbackPort()
		if err != nil {
			return "", err
		}
		pport, err := redistest.LoopbackPort()
		if err != nil {
			return "", err
		}
		client := fmt.Sprintf("http://127.0.0.1:%d", cport)
		peer := fmt.Sprintf("http://127.0.0.1:%d", pport)
		p, err := b.startProc("etcd", b.etcdBin, []string{
			"--name", "lockbench",
			"--data-dir", filepath.Join(b.dir, fmt.Sprintf("etcd-%d", cport)),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "lockbench=" + peer,
			"--logger", "zap", "--log-level", "warn",
		}, nil)
		if err != nil {
			return "", err
		}
		if err := waitHTTP(ctx, p.exited, client+"/health"); err != nil {
			lastErr = p.failed(err)
			p.stop()
			continue
		}
		b.etcd = strings.TrimPrefix(client, "http://")
		return b.etcd, nil
	}
	return "", lastErr
}

// finish notes each gateway's memory and goroutines after the load, once
// the clients' connections have closed.
func (b *bench) finish(ctx context.Context) []processStats {
	var out []processStats
	if b.gateway != nil || b.redlockGW != nil || b.traced != nil {
		time.Sleep(300 * time.Millisecond) // the clients closed; let the servers see it
	}
	for _, t := range []*target{b.gateway, b.redlockGW, b.traced} {
		if t == nil {
			continue
		}
		if t.proc != nil {
			if rss, peak, err := t.proc.rssKiB(); err == nil {
				t.stats.RSSEndMiB, t.stats.RSSPeakMiB = mib(rss), mib(peak)
			}
			if rt, err := scrapeRuntime(ctx, t.addr); err == nil {
				t.stats.GoroutinesAfter, t.stats.HeapAfterMiB = &rt.goroutines, &rt.heapMiB
			}
		}
		out = append(out, t.stats)
	}
	return out
}

func (b *bench) close() error {
	var errs []error
	if b.direct != nil {
		errs = append(errs, b.direct.Close())
	}
	for _, t := range []*target{b.gateway, b.redlockGW, b.traced} {
		if t != nil && t.stop != nil {
			errs = append(errs, t.stop())
		}
	}
	if b.traced != nil && b.traced.proc != nil {
		b.traced.proc.stop() // it flushes its spans as it stops
	}
	b.sink.report(b.stderr)
	errs = append(errs, b.sink.close())
	errs = append(errs, b.closeSentinel())
	errs = append(errs, b.closeCluster())
	for i := len(b.procs) - 1; i >= 0; i-- {
		b.procs[i].stop()
	}
	for _, srv := range b.redisServers {
		srv.Kill()
	}
	for _, f := range b.logs {
		errs = append(errs, f.Close())
	}
	if b.cfg.keep {
		return errors.Join(errs...)
	}
	return errors.Join(append(errs, os.RemoveAll(b.dir))...)
}

func (b *bench) machine() machine {
	m := machine{
		CPUs:    runtime.NumCPU(),
		CPU:     procField("/proc/cpuinfo", "model name"),
		Memory:  memTotal(),
		Kernel:  strings.TrimSpace(readFile("/proc/sys/kernel/osrelease")),
		Go:      runtime.Version(),
		Redis:   version("Redis", commandOutput(b.redisBin, "--version")),
		Commit:  "",
		InProcs: b.cfg.inProcess,
	}
	if b.etcdBin != "" {
		m.Etcd = version("etcd", commandOutput(b.etcdBin, "--version"))
	}
	if root, err := b.moduleRoot(); err == nil {
		m.Commit = commandOutput("git", "-C", root, "describe", "--always", "--dirty")
	}
	return m
}

// loadAverage is the 1-minute load average.
func loadAverage() string {
	f := strings.Fields(readFile("/proc/loadavg"))
	if len(f) == 0 {
		return "n/a"
	}
	return f[0]
}

func procField(path, name string) string {
	for line := range strings.SplitSeq(readFile(path), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// version shortens "Redis server v=7.0.15 sha=…" and "etcd Version: 3.4.23"
// to "Redis 7.0.15" and "etcd 3.4.23".
func version(name, line string) string {
	if m := versionNumber.FindString(line); m != "" {
		return name + " " + m
	}
	return line
}

var versionNumber = regexp.MustCompile(`[0-9]+\.[0-9]+\.[0-9]+`)

// memTotal is the machine's memory in GiB.
func memTotal() string {
	f := strings.Fields(procField("/proc/meminfo", "MemTotal")) // "24684084 kB"
	if len(f) != 2 || f[1] != "kB" {
		return ""
	}
	kib, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return ""
	}
	return strconv.FormatFloat(kib/(1<<20), 'f', 1, 64) + " GiB"
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func mib(kib int64) float64 { return float64(kib) / 1024 }
