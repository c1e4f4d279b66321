// Command lockbench measures lockgateway under load and sets it beside the
// floor of what HTTP plus Redis costs on the same machine and beside etcd's
// lock API, in one run, so the ratios mean something.
//
// It starts everything it measures itself: redis-server processes on free
// loopback ports (no persistence), the gateway as a separate process with
// production defaults (info JSON logging, rate limiting off), the bare
// baseline (tools/benchmark/baseline) and, when an etcd binary is installed,
// a single-node etcd. C keep-alive clients then run acquire+release cycles
// for each row in turn:
//
//  1. the gateway, Redis backend
//  2. the baseline: net/http + go-redis running the same Lua scripts
//  3. lockstore/redis.Store called directly, no HTTP
//  4. the gateway, Redlock over 5 masters
//  5. etcd 3.4's lock API over its JSON gateway
//  6. contended: all clients on one key with waiting acquires, gateway and etcd
//  7. 8. 9. floods: a small client alone, then while another client holds
//     150 k locks, keeps 3 000 acquires waiting or keeps 6 000 idle
//     connections, each on a gateway of its own (flood.go)
//  10. the concurrency curve: gateway and baseline at 1 to 512 clients
//     (curve.go)
//  11. Redis memory per held lock, over 100 000 locks (memory.go)
//  12. many waiters: 500 acquires waiting on one key, what they cost
//     Redis and the gateway (waiters.go)
//  13. many holds: 10 000 streams each holding a key through one gateway,
//     what they cost Redis and the gateway, on Redis and on Redlock
//     (holds.go)
//
// It prints one table, the ratios the project targets (information, never a
// failure), the gateway's memory before and after, and writes the results
// as JSON and an SVG chart.
//
//	go run ./tools/benchmark                     # everything, 10 s per row
//	go run ./tools/benchmark -rows gateway,baseline -duration 5s
//	go run ./tools/benchmark -rows waiters -waiters 10000   # issue 17's goal
//	go run ./tools/benchmark -rows gateway -profile-dir prof  # pprof of the gateway process
//	go run ./tools/benchmark -in-process -cpuprofile cpu.pprof -rows gateway
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		os.Exit(1)
	}
}

type config struct {
	duration    time.Duration
	warmup      time.Duration
	rounds      int
	concurrency int
	contended   int
	waitMs      int
	rows        []string
	out         string
	gatewayBin  string
	baselineBin string
	luaDir      string
	redisServer string
	etcdBin     string
	redlock     int
	inProcess   bool
	cpuProfile  string
	profileDir  string
	keep        bool
	gatewayEnv  []string // KEY=VALUE added to the gateways' production defaults
	// The flood rows (flood.go).
	floodClients int
	floodLocks   int
	floodWaiters int
	floodConns   int
	floodSettle  time.Duration
	// The concurrency curve (curve.go).
	curveLevels []int
	curveWindow time.Duration
	// Redis memory per held lock (memory.go).
	memoryLocks int
	// Many waiters on one key (waiters.go).
	waiters       int
	waitersWindow time.Duration
	// Many holds, each on a key of its own (holds.go).
	holds       int
	holdsWindow time.Duration
}

func parseConfig(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("lockbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	var rows string
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "measured time per row")
	fs.DurationVar(&c.warmup, "warmup", time.Second, "unmeasured load before each row's measured time (in each round)")
	fs.IntVar(&c.rounds, "rounds", 2, "split each row's measured time into this many rounds, interleaved with the other rows'")
	fs.IntVar(&c.concurrency, "c", 32, "concurrent keep-alive clients, each on its own key (uncontended rows)")
	fs.IntVar(&c.contended, "contended-clients", 32, "clients sharing one key in the contended rows")
	fs.IntVar(&c.waitMs, "wait-ms", 5000, "wait_ms of the gateway's contended acquires")
	fs.IntVar(&c.floodClients, "flood-clients", 4, "keep-alive clients of the small client in the flood rows")
	fs.IntVar(&c.floodLocks, "flood-locks", 150_000, "locks the flooding client holds in row 7")
	fs.IntVar(&c.floodWaiters, "flood-waiters", 3000, "waiting acquires the flooding client keeps in row 8")
	fs.IntVar(&c.floodConns, "flood-conns", 6000, "idle keep-alive connections the flooding client keeps in row 9")
	fs.DurationVar(&c.floodSettle, "flood-settle", 2*time.Second, "pause between the flood being in place and the measured load")
	curve := "1,8,32,128,512"
	fs.Func("curve", "client counts of the concurrency curve (row curve), comma-separated (default "+curve+")", func(v string) error {
		curve = v
		return nil
	})
	fs.DurationVar(&c.curveWindow, "curve-duration", 2*time.Second, "measured time of each point of the concurrency curve, per system (after -warmup)")
	fs.IntVar(&c.memoryLocks, "memory-locks", 100_000, "locks held through the gateway to measure Redis memory per lock (row memory)")
	fs.IntVar(&c.waiters, "waiters", 500, "acquires waiting on one held key through one gateway (row waiters); the goal is 10000, which needs ulimit -n above it")
	fs.DurationVar(&c.waitersWindow, "waiters-duration", 5*time.Second, "window over which the waiters' Redis commands are counted")
	fs.IntVar(&c.holds, "holds", holdsGoal, "holds (streams holding a key each) through one gateway (rows holds, holds-redlock); needs a hard open-files limit above it")
	fs.DurationVar(&c.holdsWindow, "holds-duration", 10*time.Second, "window over which the holds' Redis commands are counted")
	fs.StringVar(&rows, "rows", "all", "comma-separated rows to run: all, or "+strings.Join(rowIDs(), ", "))
	fs.StringVar(&c.out, "out", "", "JSON results file; the SVG chart goes beside it (default bench-results/<UTC time>.json)")
	fs.StringVar(&c.gatewayBin, "gateway-bin", "", "lockgateway binary to measure (default: go build ./cmd/lockgateway)")
	fs.StringVar(&c.baselineBin, "baseline-bin", "", "lockbench-baseline binary (default: go build ./tools/benchmark/baseline)")
	fs.StringVar(&c.luaDir, "lua-dir", "", "the Lua scripts the baseline runs (default: <module>/lockstore/internal/script/lua)")
	fs.StringVar(&c.redisServer, "redis-server", "", "redis-server binary (default: $REDIS_SERVER, else redis-server on PATH)")
	fs.StringVar(&c.etcdBin, "etcd", "", `etcd binary (default: etcd on PATH or /usr/bin/etcd); "none" skips the etcd rows`)
	fs.IntVar(&c.redlock, "redlock-nodes", 5, "Redis masters behind the Redlock row")
	fs.BoolVar(&c.inProcess, "in-process", false, "run the gateway inside lockbench (for -cpuprofile; numbers are not comparable)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the run here (needs -in-process); the gateway's samples carry the label role=gateway")
	fs.Func("gateway-env", "KEY=VALUE for the gateways on top of the production defaults, e.g. LOCKGW_LOG_LEVEL=warn to see what logging costs (repeatable)", func(v string) error {
		if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
			return fmt.Errorf("%q: want KEY=VALUE", v)
		}
		c.gatewayEnv = append(c.gatewayEnv, v)
		return nil
	})
	fs.StringVar(&c.profileDir, "profile-dir", "", "turn the gateways' pprof on (LOCKGW_PPROF=true) and save a CPU profile of each gateway row's measured window here")
	fs.BoolVar(&c.keep, "keep", false, "keep the work directory (logs of every process) and print where it is")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var errs []error
	if c.duration <= 0 || c.warmup < 0 {
		errs = append(errs, errors.New("-duration must be positive and -warmup not negative"))
	}
	if c.rounds < 1 {
		errs = append(errs, errors.New("-rounds must be at least 1"))
	}
	if c.concurrency < 1 || c.contended < 1 || c.floodClients < 1 {
		errs = append(errs, errors.New("-c, -contended-clients and -flood-clients must be at least 1"))
	}
	if c.floodLocks < 1 || c.floodWaiters < 1 || c.floodConns < 1 || c.floodSettle < 0 {
		errs = append(errs, errors.New("-flood-locks, -flood-waiters and -flood-conns must be at least 1, -flood-settle not negative"))
	}
	for f := range strings.SplitSeq(curve, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("-curve: %q is not a client count (want e.g. 1,8,32)", f))
			continue
		}
		c.curveLevels = append(c.curveLevels, n)
	}
	if c.curveWindow <= 0 || c.waitersWindow <= 0 || c.holdsWindow <= 0 {
		errs = append(errs, errors.New("-curve-duration, -waiters-duration and -holds-duration must be positive"))
	}
	if c.memoryLocks < 1 || c.waiters < 1 || c.holds < 1 {
		errs = append(errs, errors.New("-memory-locks, -waiters and -holds must be at least 1"))
	}
	if c.waitMs < 1 {
		errs = append(errs, errors.New("-wait-ms must be at least 1"))
	}
	if c.redlock < 3 {
		errs = append(errs, errors.New("-redlock-nodes must be at least 3"))
	}
	if c.cpuProfile != "" && !c.inProcess {
		errs = append(errs, errors.New("-cpuprofile needs -in-process: the gateway must run inside lockbench to be profiled"))
	}
	if c.profileDir != "" && c.inProcess {
		errs = append(errs, errors.New("-profile-dir profiles separate gateway processes; with -in-process use -cpuprofile"))
	}
	if rows == "all" {
		c.rows = rowIDs()
	} else {
		for id := range strings.SplitSeq(rows, ",") {
			id = strings.TrimSpace(id)
			if !slices.Contains(rowIDs(), id) {
				errs = append(errs, fmt.Errorf("-rows: unknown row %q (want %s)", id, strings.Join(rowIDs(), ", ")))
			}
			c.rows = append(c.rows, id)
		}
	}
	return c, errors.Join(errs...)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	b, err := newBench(cfg, stderr)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.close()) }()

	res := results{Time: time.Now().UTC(), Settings: newSettings(cfg)}
	loadBefore := loadAverage()
	if cfg.profileDir != "" {
		if err := os.MkdirAll(cfg.profileDir, 0o755); err != nil {
			return err
		}
	}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	if !cfg.inProcess || slices.Contains(cfg.rows, "baseline") {
		if err := b.build(); err != nil {
			return err
		}
	}
	var specs []rowSpec
	for _, spec := range rowSpecs {
		if slices.Contains(cfg.rows, spec.id) && !spec.extra {
			specs = append(specs, spec)
		}
	}
	if res.Rows, err = b.runRows(ctx, specs); err != nil {
		return err
	}
	if slices.Contains(cfg.rows, "curve") {
		if res.Curve, err = b.runCurve(ctx); err != nil {
			return fmt.Errorf("concurrency curve: %w", err)
		}
	}
	if slices.Contains(cfg.rows, "memory") {
		if res.Memory, err = b.lockMemory(ctx); err != nil {
			return fmt.Errorf("Redis memory per lock: %w", err)
		}
	}
	if slices.Contains(cfg.rows, "waiters") {
		if res.Waiters, err = b.manyWaiters(ctx); err != nil {
			return fmt.Errorf("many waiters: %w", err)
		}
	}
	for _, backend := range []string{"redis", "redlock"} {
		if !slices.Contains(cfg.rows, holdsRow(backend)) {
			continue
		}
		h, err := b.manyHolds(ctx, backend)
		if err != nil {
			return fmt.Errorf("many holds (%s): %w", backend, err)
		}
		res.Holds = append(res.Holds, *h)
	}
	res.Processes = b.finish(ctx)
	res.Machine = b.machine()
	res.Machine.LoadBefore = loadBefore
	res.Ratios = ratios(res)

	printReport(stdout, res)
	jsonPath := cfg.out
	if jsonPath == "" {
		jsonPath = filepath.Join("bench-results", res.Time.Format("20060102T150405Z")+".json")
	}
	svgPath := strings.TrimSuffix(jsonPath, filepath.Ext(jsonPath)) + ".svg"
	if err := os.MkdirAll(filepath.Dir(jsonPath), 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(jsonPath, append(data, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(svgPath, chart(res), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nresults: %s\nchart:   %s\n", jsonPath, svgPath)
	if cfg.keep {
		fmt.Fprintf(stdout, "logs:    %s\n", b.dir)
	}
	return nil
}
