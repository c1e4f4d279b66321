package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgateway/lockgateway/internal/sleep"
)

// manyWaiters (row "waiters", issue 17) keeps -waiters acquires waiting on
// one held key through one gateway, on a redis-server of its own so that
// its command counts are the waiters' alone, and measures what they cost
// while nothing changes hands: Redis scripts and commands per waiter per
// second (INFO commandstats over -waiters-duration, the commands the
// scripts run included), the gateway's resident memory per waiter
// (/proc/<pid>/status VmRSS with the waiters in place less before them),
// and every error a waiter saw. The gateway's own caps are raised to the
// waiters' number (LOCKGW_MAX_WAITING, LOCKGW_MAX_CONNS), and their wait
// (1 h) outlasts the row, so that none is refused or sent again.
type waitersResult struct {
	Waiters int `json:"waiters"`
	// Waiting is the gateway's lockgw_waiting_acquires when the window
	// began.
	Waiting       int     `json:"waiting"`
	WindowSeconds float64 `json:"window_seconds"`
	// Scripts counts EVAL, EVALSHA and FCALL (and their _RO forms);
	// Commands counts every command, those the scripts ran included, but
	// not lockbench's own INFO.
	Scripts           int64   `json:"scripts"`
	Commands          int64   `json:"commands"`
	ScriptsPerWaiter  float64 `json:"scripts_per_waiter_per_second"`
	CommandsPerWaiter float64 `json:"commands_per_waiter_per_second"`
	// ByCommand is the window's calls by command name, the busiest first
	// in the report.
	ByCommand       map[string]int64 `json:"calls_by_command"`
	RSSBeforeKiB    int64            `json:"gateway_rss_before_kib"`
	RSSWaitingKiB   int64            `json:"gateway_rss_waiting_kib"`
	RSSPerWaiterKiB float64          `json:"gateway_rss_per_waiter_kib"`
	// GoroutinesPerWaiter is the growth of the gateway's go_goroutines
	// over the waiters' number: its connection's, its handler's, and any
	// more a wait starts.
	GoroutinesPerWaiter float64        `json:"gateway_goroutines_per_waiter"`
	RampSeconds         float64        `json:"ramp_seconds"`
	Errors              int            `json:"errors"`
	ErrorKinds          map[string]int `json:"error_kinds,omitempty"`
}

// waitersGoal is the number of waiters issue 17 asks one gateway to carry
// without an error.
const waitersGoal = 10_000

func (b *bench) manyWaiters(ctx context.Context) (*waitersResult, error) {
	n := b.cfg.waiters
	addr, err := b.startRedis("redis-waiters")
	if err != nil {
		return nil, err
	}
	t, err := b.startGateway(ctx, "gateway (waiters row)", "LOCKGW_BACKEND=redis", "LOCKGW_REDIS_URL=redis://"+addr+"/0",
		"LOCKGW_MAX_WAITING="+strconv.Itoa(n), "LOCKGW_MAX_CONNS="+strconv.Itoa(n+64), "LOCKGW_MAX_WAIT=1h")
	if err != nil {
		return nil, err
	}
	defer b.stopTarget(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer rdb.Close()

	const key = "/locks/waiters/held"
	owner := newHTTPConn(t.addr)
	status, body, err := owner.do(ctx, http.MethodPut, key, []byte(`{"ttl_ms":3600000}`))
	owner.close()
	if err != nil || status != http.StatusCreated {
		return nil, fmt.Errorf("hold the key: %d %.200s %v", status, body, err)
	}
	time.Sleep(300 * time.Millisecond) // let the holder's connection close
	res := &waitersResult{Waiters: n, ErrorKinds: map[string]int{}}
	if t.proc != nil {
		if res.RSSBeforeKiB, _, err = t.proc.rssKiB(); err != nil {
			return nil, err
		}
	}

	goroutinesBefore := -1.0
	if rt, err := scrapeMetrics(ctx, t.addr, "go_goroutines"); err == nil {
		goroutinesBefore = rt["go_goroutines"]
	}
	fmt.Fprintf(b.stderr, "lockbench: 12  many waiters: %s acquires waiting on one key", thousands(float64(n)))
	wctx, stop := context.WithCancel(ctx)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		answered atomic.Int64
	)
	fail := func(kind string) {
		mu.Lock()
		res.ErrorKinds[kind]++
		mu.Unlock()
	}
	req := []byte(`{"ttl_ms":10000,"wait_ms":3600000}`)
	// Spread the connections over a second per 2 000, so the listen
	// backlog never overflows.
	spread := time.Duration(n) * 500 * time.Microsecond
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			sleep.For(wctx, time.Duration(i)*spread/time.Duration(n))
			if wctx.Err() != nil {
				return
			}
			c := newHTTPConn(t.addr)
			defer c.close()
			status, body, err := c.do(wctx, http.MethodPut, key, req)
			if wctx.Err() != nil {
				return // cut off at the end: the expected outcome
			}
			answered.Add(1)
			if err != nil {
				fail(errorKind(fmt.Errorf("PUT: %w", err)))
			} else {
				fail(errorKind(&statusError{op: "PUT", status: status, body: problemType(body)}))
			}
		})
	}
	defer func() {
		stop()
		wg.Wait()
	}()

	// Wait until the gateway reports every waiter waiting, or 60 s.
	deadline := start.Add(spread + 60*time.Second)
	for {
		if rt, err := scrapeMetrics(ctx, t.addr, "lockgw_waiting_acquires"); err == nil {
			res.Waiting = int(rt["lockgw_waiting_acquires"])
		}
		if res.Waiting >= n || time.Now().After(deadline) || int(answered.Load()) >= n || ctx.Err() != nil {
			break
		}
		sleep.For(ctx, 200*time.Millisecond)
	}
	res.RampSeconds = time.Since(start).Seconds()
	// Up to two seconds for the waiters' heartbeats to reach their steady
	// pace.
	sleep.For(ctx, min(2*time.Second, b.cfg.waitersWindow))

	before, err := commandStats(ctx, rdb)
	if err != nil {
		return nil, err
	}
	windowStart := time.Now()
	sleep.For(ctx, b.cfg.waitersWindow)
	after, err := commandStats(ctx, rdb)
	if err != nil {
		return nil, err
	}
	res.WindowSeconds = time.Since(windowStart).Seconds()
	if t.proc != nil {
		if res.RSSWaitingKiB, _, err = t.proc.rssKiB(); err != nil {
			return nil, err
		}
		res.RSSPerWaiterKiB = float64(res.RSSWaitingKiB-res.RSSBeforeKiB) / float64(n)
	}
	if rt, err := scrapeMetrics(ctx, t.addr, "lockgw_waiting_acquires", "go_goroutines"); err == nil {
		// Fewer waiting at the end than asked for is an error too, even
		// if no waiter saw one yet.
		res.Waiting = min(res.Waiting, int(rt["lockgw_waiting_acquires"]))
		if goroutinesBefore >= 0 {
			res.GoroutinesPerWaiter = (rt["go_goroutines"] - goroutinesBefore) / float64(n)
		}
	}
	res.ByCommand = map[string]int64{}
	for name, calls := range after {
		if d := calls - before[name]; d > 0 && name != "info" {
			res.ByCommand[name] = d
			res.Commands += d
			if isScript(name) {
				res.Scripts += d
			}
		}
	}
	perWaiterSecond := float64(n) * res.WindowSeconds
	res.ScriptsPerWaiter = float64(res.Scripts) / perWaiterSecond
	res.CommandsPerWaiter = float64(res.Commands) / perWaiterSecond

	stop()
	wg.Wait()
	for _, c := range res.ErrorKinds {
		res.Errors += c
	}
	if res.Waiting < n && res.Errors == 0 {
		res.ErrorKinds[fmt.Sprintf("only %d of %d waiting", res.Waiting, n)] = n - res.Waiting
		res.Errors = n - res.Waiting
	}
	if len(res.ErrorKinds) == 0 {
		res.ErrorKinds = nil
	}
	fmt.Fprintf(b.stderr, ": %.3f scripts and %.2f commands per waiter per second, gateway %.1f KiB per waiter, %d errors\n",
		res.ScriptsPerWaiter, res.CommandsPerWaiter, res.RSSPerWaiterKiB, res.Errors)
	return res, nil
}

func isScript(cmd string) bool {
	switch cmd {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
		return true
	}
	return false
}

// commandStats is INFO commandstats: calls by command name (lower case;
// subcommands as "config|get").
func commandStats(ctx context.Context, rdb *redis.Client) (map[string]int64, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	return parseCommandStats(info)
}

// parseCommandStats reads the calls by command name of an INFO reply's
// commandstats section.
func parseCommandStats(info string) (map[string]int64, error) {
	out := map[string]int64{}
	for k, v := range infoFields(info) {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		// calls=12,usec=34,usec_per_call=2.83,rejected_calls=0,failed_calls=0
		calls, _, _ := strings.Cut(v, ",")
		n, err := strconv.ParseInt(strings.TrimPrefix(calls, "calls="), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("INFO commandstats: %s:%s", k, v)
		}
		out[name] = n
	}
	return out, nil
}

// busiestF is busiest for calls per cycle.
func busiestF(calls map[string]float64) []string {
	return slices.SortedFunc(maps.Keys(calls), func(a, b string) int {
		if c := cmp.Compare(calls[b], calls[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
}

// busiest lists a window's commands by calls, most first.
func busiest(calls map[string]int64) []string {
	return slices.SortedFunc(maps.Keys(calls), func(a, b string) int {
		if calls[a] != calls[b] {
			return int(calls[b] - calls[a])
		}
		return strings.Compare(a, b)
	})
}

// redisCalls is INFO commandstats of the rows' one redis-server.
func (b *bench) redisCalls(ctx context.Context) (map[string]int64, error) {
	addr, err := b.redis(ctx)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	return commandStats(ctx, rdb)
}
