package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgateway/lockgateway/internal/sleep"
)

// manyHolds (rows "holds" and "holds-redlock", issue 28) keeps -holds
// holds open through one gateway: each a PUT /locks/{key} with Accept:
// text/event-stream on a key of its own, its stream read until the row
// ends, at the gateway's default hold TTL (LOCKGW_HOLD_TTL). On Redis
// servers of their own, so that their counts are the holds' alone, it
// measures what the holds cost while nothing changes hands: Redis scripts,
// commands and read events per hold per second over -holds-duration, and
// the gateway's resident memory per hold. The gateway's connection cap is
// raised to the holds' number (LOCKGW_MAX_CONNS), and so is the per-user
// cap on Redis (every hold comes from one address).
//
// On Redis, round trips are counted by a relay between the gateway and the
// server (relay.go): a request, one command or a whole pipeline, and its
// answer are one. Redis's own count of reads of its clients' sockets (INFO
// stats total_reads_processed) is shown beside them: a round trip costs at
// least one, and a large pipeline several, as the socket hands it over in
// parts. On Redlock that count is the only one: its node timeout (50 ms)
// leaves no room for another hop on a loaded machine (2 000 holds through
// relays met 503s and lost leases that direct connections did not), so
// the reads stand for the round trips there, from above.
type holdsResult struct {
	Backend string `json:"backend"`
	Nodes   int    `json:"redis_servers"` // Redis servers counted: 1, or Redlock's masters
	Holds   int    `json:"holds"`
	// Open is the gateway's lockgw_holds_open at the window's start or
	// end, whichever is lower.
	Open          int     `json:"open"`
	TTLms         int64   `json:"hold_ttl_ms"` // the holds' lease, as granted
	WindowSeconds float64 `json:"window_seconds"`
	// Renewed counts the renewed events the clients read in the window.
	Renewed int64 `json:"renewed_events"`
	// RoundTrips (nil where not counted: Redlock), Scripts, Commands and
	// ReadEvents are summed over the Redis servers; Commands counts those
	// the scripts ran too, and none of lockbench's own INFO.
	RoundTrips *int64 `json:"round_trips,omitempty"`
	Scripts    int64  `json:"scripts"`
	Commands   int64  `json:"commands"`
	ReadEvents int64  `json:"read_events"`
	// Per hold open (Open) per second, over all the Redis servers; so are
	// the memory and goroutine figures per hold.
	RenewedPerHold    float64          `json:"renewed_per_hold_per_second"`
	RoundTripsPerHold *float64         `json:"round_trips_per_hold_per_second,omitempty"`
	ScriptsPerHold    float64          `json:"scripts_per_hold_per_second"`
	CommandsPerHold   float64          `json:"commands_per_hold_per_second"`
	ReadEventsPerHold float64          `json:"read_events_per_hold_per_second"`
	ByCommand         map[string]int64 `json:"calls_by_command"`
	RSSBeforeKiB      int64            `json:"gateway_rss_before_kib"`
	RSSHoldingKiB     int64            `json:"gateway_rss_holding_kib"`
	RSSPerHoldKiB     float64          `json:"gateway_rss_per_hold_kib"`
	// GoroutinesPerHold is the growth of the gateway's go_goroutines over
	// the holds' number; StackKiBPerHold and HeapKiBPerHold that of its
	// goroutine stacks and heap in use (go_memstats_stack_inuse_bytes,
	// go_memstats_heap_inuse_bytes): where the RSS per hold goes.
	GoroutinesPerHold float64        `json:"gateway_goroutines_per_hold"`
	StackKiBPerHold   float64        `json:"gateway_stack_per_hold_kib"`
	HeapKiBPerHold    float64        `json:"gateway_heap_inuse_per_hold_kib"`
	RampSeconds       float64        `json:"ramp_seconds"`
	Errors            int            `json:"errors"`
	ErrorKinds        map[string]int `json:"error_kinds,omitempty"`
}

// Issue 28's goals for 10 000 holds on one gateway.
const (
	holdsGoal              = 10_000
	holdsRoundTripsGoal    = 0.05 // per hold per second
	holdsRSSPerHoldGoalKiB = 24
)

// holdsFDHeadroom is what lockbench keeps open besides the holds'
// connections: Redis and gateway connections, logs, the metrics scrapes.
const holdsFDHeadroom = 256

func (b *bench) manyHolds(ctx context.Context, backend string) (*holdsResult, error) {
	n := b.cfg.holds
	if err := checkFDLimit(n + holdsFDHeadroom); err != nil {
		return nil, err
	}
	res := &holdsResult{Backend: backend, Holds: n, ErrorKinds: map[string]int{}}
	// The gateway keeps one connection per hold and a few more for the
	// metrics scrapes; at its cap a new connection would wait for a hold
	// to end.
	env := []string{"LOCKGW_MAX_CONNS=" + strconv.Itoa(n+64)}
	names := []string{"redis-holds"}
	if backend == "redlock" {
		names = nil
		for i := range b.cfg.redlock {
			names = append(names, fmt.Sprintf("redlock-holds-%d", i+1))
		}
	}
	// The gateway reaches Redis through a relay that counts its round
	// trips (not Redlock's nodes: see above); lockbench reads INFO
	// directly.
	var addrs, urls []string
	var relays []*relay
	defer func() {
		for _, r := range relays {
			_ = r.close()
		}
	}()
	for _, name := range names {
		addr, err := b.startRedis(name)
		if err != nil {
			return nil, err
		}
		addrs, urls = append(addrs, addr), append(urls, "redis://"+addr+"/0")
		if backend == "redis" {
			r, err := newRelay(addr)
			if err != nil {
				return nil, err
			}
			relays, urls[len(urls)-1] = append(relays, r), "redis://"+r.addr()+"/0"
		}
	}
	if backend == "redlock" {
		env = append(env, "LOCKGW_BACKEND=redlock", "LOCKGW_REDLOCK_URLS="+strings.Join(urls, ","))
	} else {
		// Every hold comes from lockbench's one address: the per-user
		// cap stays on, as by default (a renewal moves its quota count),
		// but above the holds' number.
		env = append(env, "LOCKGW_BACKEND=redis", "LOCKGW_REDIS_URL="+urls[0],
			"LOCKGW_MAX_LOCKS_PER_USER="+strconv.Itoa(n+1))
	}
	res.Nodes = len(addrs)
	roundTrips := func() (sum int64) {
		for _, r := range relays {
			sum += r.roundTrips.Load()
		}
		return sum
	}
	t, err := b.startGateway(ctx, "gateway (holds, "+backend+")", env...)
	if err != nil {
		return nil, err
	}
	defer b.stopTarget(t)
	rdbs := make([]*redis.Client, len(addrs))
	for i, addr := range addrs {
		rdbs[i] = redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
		defer rdbs[i].Close()
	}

	// One hold first, so that the gateway's Redis connections and script
	// cache are in place before the "before" figures; its TTL is the
	// holds' own.
	warm := &holder{addr: t.addr, path: "/locks/holds/warm"}
	granted, err := warm.open(ctx)
	if err != nil {
		return nil, fmt.Errorf("first hold: %w", err)
	}
	res.TTLms = granted.TTLms
	warm.close()
	time.Sleep(300 * time.Millisecond) // let its release and connection go
	if t.proc != nil {
		if res.RSSBeforeKiB, _, err = t.proc.rssKiB(); err != nil {
			return nil, err
		}
	}
	runtimeBefore, runtimeErr := scrapeMetrics(ctx, t.addr, holdsRuntimeMetrics...)

	fmt.Fprintf(b.stderr, "lockbench: %-3s many holds: %s streams holding a key each through one gateway (%s)",
		rowNo(holdsRow(backend)), thousands(float64(n)), backend)
	hctx, stop := context.WithCancel(ctx)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		renewed atomic.Int64
		ended   atomic.Int64
	)
	fail := func(kind string) {
		mu.Lock()
		res.ErrorKinds[kind]++
		mu.Unlock()
	}
	// Spread the connections over a second per 2 000, so the listen
	// backlog never overflows.
	spread := time.Duration(n) * 500 * time.Microsecond
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			sleep.For(hctx, time.Duration(i)*spread/time.Duration(n))
			if hctx.Err() != nil {
				return
			}
			h := &holder{addr: t.addr, path: fmt.Sprintf("/locks/holds/%d", i)}
			defer h.close()
			if _, err := h.open(hctx); err != nil {
				if hctx.Err() == nil {
					ended.Add(1)
					fail(errorKind(err))
				}
				return
			}
			event, err := h.follow(&renewed)
			if hctx.Err() != nil {
				return // cut off at the end: the expected outcome
			}
			ended.Add(1)
			if err != nil {
				fail(errorKind(fmt.Errorf("stream: %w", err)))
			} else {
				fail("hold ended early: " + event)
			}
		})
	}
	defer func() {
		stop()
		wg.Wait()
	}()

	// Wait until the gateway reports every hold open, or 60 s.
	deadline := start.Add(spread + 60*time.Second)
	for {
		if rt, err := scrapeMetrics(ctx, t.addr, "lockgw_holds_open"); err == nil {
			res.Open = int(rt["lockgw_holds_open"])
		}
		if res.Open >= n || time.Now().After(deadline) || int(ended.Load()) >= n || ctx.Err() != nil {
			break
		}
		sleep.For(ctx, 200*time.Millisecond)
	}
	res.RampSeconds = time.Since(start).Seconds()
	// A renewal interval (a third of the TTL) for the last holds to reach
	// their steady pace, at most the window.
	sleep.For(ctx, min(time.Duration(res.TTLms)*time.Millisecond/3+time.Second, b.cfg.holdsWindow))

	before, err := redisCounts(ctx, rdbs)
	if err != nil {
		return nil, err
	}
	renewedBefore, tripsBefore := renewed.Load(), roundTrips()
	windowStart := time.Now()
	sleep.For(ctx, b.cfg.holdsWindow)
	if len(relays) > 0 {
		trips := roundTrips() - tripsBefore
		res.RoundTrips = &trips
	}
	after, err := redisCounts(ctx, rdbs)
	if err != nil {
		return nil, err
	}
	res.WindowSeconds = time.Since(windowStart).Seconds()
	res.Renewed = renewed.Load() - renewedBefore
	if t.proc != nil {
		if res.RSSHoldingKiB, _, err = t.proc.rssKiB(); err != nil {
			return nil, err
		}
	}
	rt, err := scrapeMetrics(ctx, t.addr, append([]string{"lockgw_holds_open"}, holdsRuntimeMetrics...)...)
	if err == nil {
		// Fewer open at the end than asked for is an error too, even if
		// no client saw one yet.
		res.Open = min(res.Open, int(rt["lockgw_holds_open"]))
	}
	// Per hold is per hold open: where some failed, the others' cost.
	held := float64(max(res.Open, 1))
	if t.proc != nil {
		res.RSSPerHoldKiB = float64(res.RSSHoldingKiB-res.RSSBeforeKiB) / held
	}
	if err == nil && runtimeErr == nil {
		per := func(name string) float64 { return (rt[name] - runtimeBefore[name]) / held }
		res.GoroutinesPerHold = per("go_goroutines")
		res.StackKiBPerHold = per("go_memstats_stack_inuse_bytes") / 1024
		res.HeapKiBPerHold = per("go_memstats_heap_inuse_bytes") / 1024
	}
	if b.cfg.profileDir != "" {
		b.saveHoldProfiles(ctx, t.addr, backend)
	}
	res.ByCommand = map[string]int64{}
	for name, calls := range after.calls {
		if d := calls - before.calls[name]; d > 0 && name != "info" {
			res.ByCommand[name] = d
			res.Commands += d
			if isScript(name) {
				res.Scripts += d
			}
		}
	}
	// Less the read of lockbench's own INFO after the window, on each
	// server (the one before it was counted before the figures were read).
	res.ReadEvents = after.reads - before.reads - int64(len(rdbs))
	perHoldSecond := held * res.WindowSeconds
	res.RenewedPerHold = float64(res.Renewed) / perHoldSecond
	if res.RoundTrips != nil {
		perHold := float64(*res.RoundTrips) / perHoldSecond
		res.RoundTripsPerHold = &perHold
	}
	res.ScriptsPerHold = float64(res.Scripts) / perHoldSecond
	res.CommandsPerHold = float64(res.Commands) / perHoldSecond
	res.ReadEventsPerHold = float64(res.ReadEvents) / perHoldSecond

	stop()
	wg.Wait()
	for _, c := range res.ErrorKinds {
		res.Errors += c
	}
	if res.Open < n && res.Errors == 0 {
		res.ErrorKinds[fmt.Sprintf("only %d of %d open", res.Open, n)] = n - res.Open
		res.Errors = n - res.Open
	}
	if len(res.ErrorKinds) == 0 {
		res.ErrorKinds = nil
	}
	fmt.Fprintf(b.stderr, ": %s round trips, %.4f socket reads and %.3f scripts per hold per second, gateway %.1f KiB per hold, %d errors\n",
		fmtOrNA(res.RoundTripsPerHold, 4), res.ReadEventsPerHold, res.ScriptsPerHold, res.RSSPerHoldKiB, res.Errors)
	return res, nil
}

// holdsRuntimeMetrics are the gateway's Go runtime figures read before
// and with the holds in place.
var holdsRuntimeMetrics = []string{"go_goroutines", "go_memstats_stack_inuse_bytes", "go_memstats_heap_inuse_bytes"}

// saveHoldProfiles saves the gateway's heap and goroutine profiles, with
// the holds in place, in -profile-dir.
func (b *bench) saveHoldProfiles(ctx context.Context, addr, backend string) {
	for _, name := range []string{"heap", "goroutine"} {
		path := filepath.Join(b.cfg.profileDir, fmt.Sprintf("holds-%s-%s-%d.pprof", backend, name, time.Now().UnixNano()))
		if err := fetchTo(ctx, "http://"+addr+"/debug/pprof/"+name, path); err != nil {
			fmt.Fprintf(b.stderr, " (no %s profile: %v)", name, err)
		}
	}
}

// checkFDLimit fails when this process may not open need files: each hold
// is a connection here and one in the gateway, whose limit (a Go program
// raises its soft limit to the hard one) is the same hard limit.
func checkFDLimit(need int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("RLIMIT_NOFILE: %w", err)
	}
	if lim.Max < uint64(need) {
		return fmt.Errorf("the holds need %d open files in lockbench and in the gateway, but the hard limit is %d: "+
			"raise it (as root: ulimit -Hn %d; a systemd unit: LimitNOFILE=%d; a container: --ulimit nofile=%d) or lower -holds",
			need, lim.Max, need, need, need)
	}
	return nil
}

// counts are a Redis server's command calls by name and read events, or
// their sums over servers.
type counts struct {
	calls map[string]int64
	reads int64
}

// redisCounts reads INFO commandstats and stats of each server, in one
// INFO each, and sums them.
func redisCounts(ctx context.Context, rdbs []*redis.Client) (counts, error) {
	sum := counts{calls: map[string]int64{}}
	for _, rdb := range rdbs {
		info, err := rdb.Info(ctx, "commandstats", "stats").Result()
		if err != nil {
			return counts{}, fmt.Errorf("INFO commandstats stats: %w", err)
		}
		calls, err := parseCommandStats(info)
		if err != nil {
			return counts{}, err
		}
		for name, n := range calls {
			sum.calls[name] += n
		}
		reads, err := strconv.ParseInt(infoFields(info)["total_reads_processed"], 10, 64)
		if err != nil {
			return counts{}, fmt.Errorf("INFO stats: no total_reads_processed (Redis 6 or later has it)")
		}
		sum.reads += reads
	}
	return sum, nil
}

// holder is one hold: a connection whose PUT's response is the hold's
// event stream.
type holder struct {
	addr, path string
	conn       net.Conn
	events     *bufio.Reader // the response body
}

// grant is what lockbench reads of the acquired event.
type grant struct {
	TTLms int64 `json:"ttl_ms"`
}

// open sends the hold's PUT and reads up to its acquired event. Ending
// ctx cuts it.
func (h *holder) open(ctx context.Context) (grant, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", h.addr)
	if err != nil {
		return grant{}, err
	}
	h.conn = conn
	// A stream is read until the row ends: ending ctx closes it.
	context.AfterFunc(ctx, func() { _ = conn.Close() })
	req := "PUT " + h.path + " HTTP/1.1\r\nHost: " + h.addr + "\r\nUser-Agent: lockbench\r\nAccept: text/event-stream\r\nContent-Length: 0\r\n\r\n"
	if _, err := conn.Write([]byte(req)); err != nil {
		return grant{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 1024), nil)
	if err != nil {
		return grant{}, err
	}
	if resp.StatusCode != http.StatusCreated || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		return grant{}, &statusError{op: "PUT (hold)", status: resp.StatusCode, body: problemType(body.Bytes())}
	}
	h.events = bufio.NewReader(resp.Body)
	event, data, err := h.next()
	if err != nil {
		return grant{}, err
	}
	if event != "acquired" {
		return grant{}, fmt.Errorf("the stream began with %q, not acquired", event)
	}
	var g grant
	if err := json.Unmarshal(data, &g); err != nil {
		return grant{}, fmt.Errorf("acquired: %w", err)
	}
	return g, nil
}

// follow reads the stream, counting renewed events, until it ends: it
// returns the final event ("event reason") or the read's error.
func (h *holder) follow(renewed *atomic.Int64) (string, error) {
	for {
		event, data, err := h.next()
		if err != nil {
			return "", err
		}
		if event == "renewed" {
			renewed.Add(1)
			continue
		}
		var end struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(data, &end)
		return strings.TrimSpace(event + " " + end.Reason), nil
	}
}

// next reads the stream's next event, skipping comments (heartbeats).
func (h *holder) next() (event string, data []byte, err error) {
	for {
		line, err := h.events.ReadSlice('\n')
		if err != nil {
			return "", nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			if event != "" || data != nil {
				return event, data, nil
			}
		case bytes.HasPrefix(line, []byte("event:")):
			event = string(bytes.TrimSpace(line[len("event:"):]))
		case bytes.HasPrefix(line, []byte("data:")):
			data = append(data, bytes.TrimSpace(line[len("data:"):])...)
		}
	}
}

func (h *holder) close() {
	if h.conn != nil {
		_ = h.conn.Close()
	}
}

// holdsRow is the row id of the holds on backend.
func holdsRow(backend string) string {
	if backend == "redlock" {
		return "holds-redlock"
	}
	return "holds"
}
