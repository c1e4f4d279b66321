package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgateway/lockgateway/internal/randid"
)

// backendTimeout is the gateway's default deadline for one store call; the
// baseline uses the same for its Redis client and each script run.
const backendTimeout = time.Second

// fenceMargin mirrors lockstore/redis.FenceMargin: how long a fence counter
// outlives its lease. It is an argument of acquire.lua and release.lua.
const fenceMargin = time.Second

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("lockbench-baseline", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8081", "listen address")
	redisURL := fs.String("redis-url", "redis://127.0.0.1:6379/0", "the Redis to run the scripts on")
	luaDir := fs.String("lua-dir", "lockstore/internal/script/lua", "directory holding the gateway's acquire.lua and release.lua")
	if err := fs.Parse(args); err != nil {
		return err
	}

	acquire, err := loadScript(filepath.Join(*luaDir, "acquire.lua"), len(acquireValues("", 0)))
	if err != nil {
		return err
	}
	inspect, err := loadScript(filepath.Join(*luaDir, "inspect.lua"), 0)
	if err != nil {
		return err
	}
	release, err := loadScript(filepath.Join(*luaDir, "release.lua"), len(releaseValues("", "", 0)))
	if err != nil {
		return err
	}

	opts, err := redis.ParseURL(*redisURL)
	if err != nil {
		return fmt.Errorf("--redis-url: %w", err)
	}
	// The gateway's client settings (server.openStore), so the pool behaves
	// the same under load.
	opts.DialTimeout = backendTimeout
	opts.ReadTimeout = backendTimeout
	opts.WriteTimeout = backendTimeout
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = -1
	opts.DialerRetries = 1
	client := redis.NewClient(opts)
	defer client.Close()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           &baseline{redis: client, acquire: acquire, inspect: inspect, release: release},
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "lockbench-baseline listening on %s\n", ln.Addr())

	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}

// script is one of the gateway's Lua scripts and the arguments it takes,
// read from its header comment:
//
//	-- KEYS[1]  the lock, "lockgw:{<key>}:lock"; …
//	-- ARGV[1]  SHA-256 of the token, 64 lowercase hex digits
//	-- ARGV[7]  the key's notification channel, "lockgw:{<key>}:released"
//
// KEYS, and ARGV that name a Redis key or channel, follow the quoted
// pattern; the other ARGV are values the baseline passes by position.
type script struct {
	*redis.Script
	keys     []string       // patterns holding "<key>"
	argvKeys map[int]string // ARGV index (0-based) → pattern
	argc     int
}

var (
	keysLine    = regexp.MustCompile(`^--\s+KEYS\[(\d+)\]`)
	argvLine    = regexp.MustCompile(`^--\s+ARGV\[(\d+)\]`)
	keyPattern  = regexp.MustCompile(`"(lockgw:\{<key>\}[^"]*)"`)
	errOutdated = errors.New("the script's arguments changed; update tools/benchmark/baseline to pass them")
)

// loadScript reads a script and checks that the baseline can pass every
// ARGV it takes: a key pattern, or one of the values it knows (nValues).
func loadScript(path string, nValues int) (script, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return script{}, fmt.Errorf("%w (run from the repository root or pass -lua-dir)", err)
	}
	s := script{argvKeys: map[int]string{}}
	optional := false    // from the first ARGV the Redis backend leaves out
	redlockOnly := false // in a "-- Redlock only:" block, up to the next "--"
	sc := bufio.NewScanner(strings.NewReader(string(src)))
	for sc.Scan() {
		line := sc.Text()
		switch strings.TrimSpace(line) {
		case "-- Redlock only:":
			redlockOnly = true
		case "--":
			redlockOnly = false
		}
		pattern := keyPattern.FindStringSubmatch(line)
		if m := keysLine.FindStringSubmatch(line); m != nil {
			if strings.Contains(line, "absent without a quota") || redlockOnly {
				// A per-user quota's keys, or Redlock's: the baseline
				// mirrors the Redis backend without a quota
				// (LOCKGW_MAX_LOCKS_PER_USER=0).
				continue
			}
			n, _ := strconv.Atoi(m[1])
			if n != len(s.keys)+1 || pattern == nil {
				return script{}, fmt.Errorf("%s: cannot read KEYS[%s] from %q: %w", path, m[1], line, errOutdated)
			}
			s.keys = append(s.keys, pattern[1])
		}
		if m := argvLine.FindStringSubmatch(line); m != nil && !optional {
			// Trailing Redlock-only ARGV: the Redis backend, which the
			// baseline mirrors, does not pass them.
			if strings.Contains(line, "absent for Redis") {
				optional = true
				continue
			}
			n, _ := strconv.Atoi(m[1])
			if n != s.argc+1 {
				return script{}, fmt.Errorf("%s: ARGV[%d] out of order: %w", path, n, errOutdated)
			}
			s.argc = n
			if pattern != nil {
				s.argvKeys[n-1] = pattern[1]
			} else if n > nValues {
				return script{}, fmt.Errorf("%s: ARGV[%d] is a value the baseline does not know: %w", path, n, errOutdated)
			}
		}
	}
	if len(s.keys) == 0 {
		return script{}, fmt.Errorf("%s: no KEYS in the header: %w", path, errOutdated)
	}
	s.Script = redis.NewScript(string(src))
	return s, nil
}

// acquireValues and releaseValues are the ARGV values the gateway passes
// for a caller that does not wait, by position; a script's ARGV that name
// a key or a channel come from its header instead.
func acquireValues(digest string, ttl time.Duration) []any {
	// digest, TTL, owner, fence margin, waiter id, waiter heartbeat,
	// (channel: from the header), fence seed (0: Redis TIME), Redlock's
	// round id and provisional TTL (none), a quota's cap and user (none),
	// how to tell waiters (a single Redis: PUBLISH), hold at least (none),
	// quota sets counted here (not a Cluster's)
	return []any{digest, ttl.Milliseconds(), "", fenceMargin.Milliseconds(), "", 0, "", 0, "", 0, 0, "", "PUBLISH", 0, "0"}
}

func releaseValues(digest, value string, expiry int64) []any {
	// digest, (channel: from the header), fence margin, how to tell the
	// next waiter (a single Redis: PUBLISH), and the lease as read (its
	// value and expiry), which is all a release deletes, whether to
	// honour a hold-at-least and Redlock's least lingering (none is asked
	// for), whether it is a forced release (no), and quota sets counted
	// here (not a Cluster's)
	return []any{digest, "", fenceMargin.Milliseconds(), "PUBLISH", value, expiry, "1", 0, "0", "0"}
}

func (s script) run(ctx context.Context, c *redis.Client, key string, values []any) *redis.Cmd {
	keys := make([]string, len(s.keys))
	for i, p := range s.keys {
		keys[i] = strings.Replace(p, "<key>", key, 1)
	}
	argv := make([]any, s.argc)
	for i := range argv {
		if p, ok := s.argvKeys[i]; ok {
			argv[i] = strings.Replace(p, "<key>", key, 1)
		} else {
			argv[i] = values[i]
		}
	}
	return s.Run(ctx, c, keys, argv...)
}

type baseline struct {
	redis                     *redis.Client
	acquire, inspect, release script
}

func (b *baseline) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		w.WriteHeader(http.StatusOK)
		return
	}
	key, ok := strings.CutPrefix(r.URL.Path, "/locks/")
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	switch r.Method {
	case http.MethodPut:
		b.serveAcquire(w, r, key)
	case http.MethodDelete:
		b.serveRelease(w, r, key)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

func (b *baseline) serveAcquire(w http.ResponseWriter, r *http.Request, key string) {
	var req struct {
		TTLms int64 `json:"ttl_ms"`
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if len(body) > 0 {
		_ = json.Unmarshal(body, &req)
	}
	ttl := 30 * time.Second
	if req.TTLms > 0 {
		ttl = time.Duration(req.TTLms) * time.Millisecond
	}
	token := newToken()
	ctx, cancel := context.WithTimeout(r.Context(), backendTimeout)
	defer cancel()
	reply, err := b.acquire.run(ctx, b.redis, key, acquireValues(digest(token), ttl)).Slice()
	if err != nil || len(reply) < 2 {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if code, _ := reply[0].(int64); code == 0 {
		w.WriteHeader(http.StatusConflict)
		return
	}
	// The value is "<digest>:<fence>+<length ms>:<owner>".
	value, _ := reply[1].(string)
	_, rest, _ := strings.Cut(value, ":")
	fence, _, _ := strings.Cut(rest, ":")
	fence, _, _ = strings.Cut(fence, "+")
	out := make([]byte, 0, 96)
	out = append(out, `{"token":"`...)
	out = append(out, token...)
	out = append(out, `","fence":`...)
	out = append(out, fence...)
	out = append(out, "}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(out)
}

func (b *baseline) serveRelease(w http.ResponseWriter, r *http.Request, key string) {
	token := r.Header.Get("Lock-Token")
	ctx, cancel := context.WithTimeout(r.Context(), backendTimeout)
	defer cancel()
	// As the gateway does (docs/safety.md, "Late writes on redis", rule
	// V2): read the lease, then delete it only as read.
	read, err := b.inspect.run(ctx, b.redis, key, nil).Slice()
	if err == nil && len(read) == 0 {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	var code int64
	if err == nil {
		value, _ := read[0].(string)
		expiry, _ := read[2].(int64)
		code, err = b.release.run(ctx, b.redis, key, releaseValues(digest(token), value, expiry)).Int64()
	}
	switch {
	case err != nil:
		w.WriteHeader(http.StatusServiceUnavailable)
	case code == 1:
		w.WriteHeader(http.StatusNoContent)
	case code == 0:
		w.WriteHeader(http.StatusNotFound)
	default:
		w.WriteHeader(http.StatusPreconditionFailed)
	}
}

// newToken is lockstore.NewToken: 128 bits from crypto/rand, URL-safe base64.
func newToken() string { return randid.New(16) }

// digest is what the scripts compare: SHA-256 of the token in hex.
func digest(token string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:])
}
