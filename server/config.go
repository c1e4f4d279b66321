package server

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/lockgateway/lockgateway/ratelimit"
)

// Config is the gateway's configuration. Every field comes from a flag or
// from the LOCKGW_* variable of the same name; a flag wins over the variable.
type Config struct {
	Addr             string
	Backend          string
	RedisURL         string
	RedlockURLs      []string
	RedlockTimeout   time.Duration
	RateLimitWindow  time.Duration
	RateLimitRoutes  string
	RateLimitFail    string // open or closed
	RateLimitShadow  bool
	RateLimitTimeout time.Duration
	UserHeader       string
	TrustedProxies   []netip.Prefix
	APIKeysFile      string
	PProf            bool
	LogLevel         zerolog.Level
	LogFormat        string
	DefaultTTL       time.Duration
	MaxTTL           time.Duration
	MaxWait          time.Duration
	MaxBodyBytes     int64
	BackendTimeout   time.Duration
	ShutdownTimeout  time.Duration
	// What one client can make the gateway hold (limits.go): MaxConns and
	// MaxWaiting are 0 for "auto", derived from the memory limit.
	MemoryLimit string // "auto" or a size, as GOMEMLIMIT reads it
	MaxConns    int
	MaxWaiting  int
	IdleTimeout time.Duration
	// Live locks (quota.go). MaxLocksPerUser is final: "auto" is read as
	// defaultMaxLocksPerUser, or 0 (no cap) with redlock. MaxLocks is 0 for
	// "auto", derived from the memory limit; it bounds the memory backend
	// only.
	MaxLocksPerUser int
	MaxLocks        int
}

// Backends the gateway can run on.
const (
	BackendMemory  = "memory"
	BackendRedis   = "redis"
	BackendRedlock = "redlock"
)

// parseConfig reads flags from args and, for each flag not given, the
// LOCKGW_* variable from getenv. Nonsense is an error that says what is
// wrong and what would be right.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("lockgateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		addr             = fs.String("addr", ":8080", "listen address (LOCKGW_ADDR)")
		backend          = fs.String("backend", BackendMemory, "lock backend: memory, redis or redlock (LOCKGW_BACKEND)")
		redisURL         = fs.String("redis-url", "redis://127.0.0.1:6379/0", "Redis URL for the redis backend (LOCKGW_REDIS_URL)")
		redlockURLs      = fs.String("redlock-urls", "", "comma-separated redis:// URLs of ≥ 3 independent masters (LOCKGW_REDLOCK_URLS)")
		redlockTimeout   = fs.String("redlock-node-timeout", "50ms", "deadline for one Redlock node in every operation (LOCKGW_REDLOCK_NODE_TIMEOUT)")
		rateLimitWindow  = fs.String("rate-limit-window", "0", "per-user window, one request each; 0 turns rate limiting off (LOCKGW_RATE_LIMIT_WINDOW)")
		rateLimitRoutes  = fs.String("rate-limit-routes", "PUT /locks/*", "comma-separated \"METHOD /locks/...\" routes the limit covers (LOCKGW_RATE_LIMIT_ROUTES)")
		rateLimitFail    = fs.String("rate-limit-fail", "open", "when the store does not answer: open (admit) or closed (503) (LOCKGW_RATE_LIMIT_FAIL)")
		rateLimitShadow  = fs.String("rate-limit-shadow", "false", "log and send headers but never refuse (LOCKGW_RATE_LIMIT_SHADOW)")
		rateLimitTimeout = fs.String("rate-limit-timeout", "100ms", "deadline for one rate-limit store call (LOCKGW_RATE_LIMIT_TIMEOUT)")
		userHeader       = fs.String("user-header", "", "header naming the user, honoured only from trusted proxies (LOCKGW_USER_HEADER)")
		trustedProxies   = fs.String("trusted-proxies", "", "comma-separated CIDRs whose X-Forwarded-For and user header are believed (LOCKGW_TRUSTED_PROXIES)")
		pprof            = fs.String("pprof", "false", "serve Go's profiler at /debug/pprof/, without cmdline (LOCKGW_PPROF); needs API keys or a loopback --addr")
		apiKeysFile      = fs.String("api-keys-file", "", "JSON file of users and key digests; set, every /locks request needs a key (LOCKGW_API_KEYS_FILE)")
		logLevel         = fs.String("log-level", "info", "debug, info, warn or error (LOCKGW_LOG_LEVEL)")
		logFormat        = fs.String("log-format", "json", "json or console (LOCKGW_LOG_FORMAT)")
		defaultTTL       = fs.String("default-ttl", "30s", "lease length when a request names none (LOCKGW_DEFAULT_TTL)")
		maxTTL           = fs.String("max-ttl", "24h", "longest lease a request may ask for (LOCKGW_MAX_TTL)")
		maxWait          = fs.String("max-wait", "60s", "longest wait_ms a request may ask for (LOCKGW_MAX_WAIT)")
		maxBody          = fs.String("max-body-bytes", "65536", "request body limit in bytes (LOCKGW_MAX_BODY_BYTES)")
		backendTimeout   = fs.String("backend-timeout", "1s", "deadline for one backend call (LOCKGW_BACKEND_TIMEOUT)")
		shutdownTimeout  = fs.String("shutdown-timeout", "15s", "how long a SIGTERM waits for in-flight requests (LOCKGW_SHUTDOWN_TIMEOUT)")
		memoryLimit      = fs.String("memory-limit", "auto", "Go's soft memory limit: auto (90% of the cgroup's limit, else of the machine's memory) or a size such as 512MiB (LOCKGW_MEMORY_LIMIT)")
		maxConns         = fs.String("max-conns", "auto", fmt.Sprintf("most connections open at once; auto: one per %d KiB of the memory limit, %d to %d (LOCKGW_MAX_CONNS)", connBudget>>10, minConns, maxConns))
		maxWaiting       = fs.String("max-waiting", "auto", fmt.Sprintf("most acquires waiting at once; auto: one per %d KiB of the memory limit, %d to %d (LOCKGW_MAX_WAITING)", waiterBudget>>10, minWaiting, maxWaiting))
		idleTimeout      = fs.String("idle-timeout", "30s", "how long a keep-alive connection may sit idle (LOCKGW_IDLE_TIMEOUT)")
		maxLocksPerUser  = fs.String("max-locks-per-user", "auto", fmt.Sprintf("most live locks one user may hold; 0 is no cap; auto: %d, or no cap with redlock, which does not count yet (LOCKGW_MAX_LOCKS_PER_USER)", defaultMaxLocksPerUser))
		maxLocks         = fs.String("max-locks", "auto", fmt.Sprintf("memory backend: most live locks in all; auto: one per %d KiB of the memory limit, %d to %d (LOCKGW_MAX_LOCKS)", lockBudget>>10, minLocks, maxAutoLocks))
	)
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q; every setting is a --flag", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	// value is the flag when given, else its LOCKGW_ variable, else the default.
	value := func(name string, p *string) (string, string) {
		env := "LOCKGW_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if !given[name] {
			if v := getenv(env); v != "" {
				return v, env
			}
		}
		return *p, "--" + name
	}

	var c Config
	var errs []error
	var err error
	duration := func(name string, p *string, min time.Duration) time.Duration {
		v, src := value(name, p)
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %q is not a duration (examples: 500ms, 30s, 24h)", src, v))
		case d < min:
			errs = append(errs, fmt.Errorf("%s: %v is below the minimum %v", src, d, min))
		}
		return d
	}

	c.Addr, _ = value("addr", addr)
	var src string
	c.Backend, src = value("backend", backend)
	switch c.Backend {
	case BackendMemory, BackendRedis, BackendRedlock:
	default:
		errs = append(errs, fmt.Errorf("%s: unknown backend %q (want memory, redis or redlock)", src, c.Backend))
	}

	// A Redis address with no backend named would otherwise serve the
	// memory backend without a word: locks a user believes are shared
	// would live in one process. Refuse, and say what to set.
	if !given["backend"] && getenv("LOCKGW_BACKEND") == "" {
		for _, n := range []struct{ flag, env, backend string }{
			{"redis-url", "LOCKGW_REDIS_URL", BackendRedis},
			{"redlock-urls", "LOCKGW_REDLOCK_URLS", BackendRedlock},
		} {
			if given[n.flag] || getenv(n.env) != "" {
				_, from := value(n.flag, new(string))
				errs = append(errs, fmt.Errorf("%s is set but no backend is chosen, so it would be ignored and locks kept in this process's memory; set LOCKGW_BACKEND=%s (or --backend %s), or unset %s to use the memory backend", from, n.backend, n.backend, from))
			}
		}
	}

	c.RedisURL, src = value("redis-url", redisURL)
	if c.Backend == BackendRedis {
		if err := checkRedisURL(c.RedisURL); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", src, err))
		}
	}
	urls, src := value("redlock-urls", redlockURLs)
	if c.Backend == BackendRedlock {
		c.RedlockURLs, errs = redlockList(urls, src, errs)
	}
	c.RedlockTimeout = duration("redlock-node-timeout", redlockTimeout, time.Millisecond)
	c.RateLimitWindow = duration("rate-limit-window", rateLimitWindow, 0)
	if c.RateLimitWindow > 0 && c.RateLimitWindow < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("rate limit window %v: use 0 (off) or at least 10ms", c.RateLimitWindow))
	}
	c.RateLimitRoutes, src = value("rate-limit-routes", rateLimitRoutes)
	if _, err := ratelimit.Routes(c.RateLimitRoutes); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", src, err))
	}
	for r := range strings.SplitSeq(c.RateLimitRoutes, ",") {
		if _, path, _ := strings.Cut(strings.TrimSpace(r), " "); path != "" && !strings.HasPrefix(path, "/locks/") {
			errs = append(errs, fmt.Errorf("%s: %q: only /locks/ routes can be limited (the check endpoint always is)", src, r))
		}
	}
	c.RateLimitFail, src = value("rate-limit-fail", rateLimitFail)
	if c.RateLimitFail != "open" && c.RateLimitFail != "closed" {
		errs = append(errs, fmt.Errorf("%s: %q: want open or closed", src, c.RateLimitFail))
	}
	shadow, src := value("rate-limit-shadow", rateLimitShadow)
	if c.RateLimitShadow, err = strconv.ParseBool(shadow); err != nil {
		errs = append(errs, fmt.Errorf("%s: %q: want true or false", src, shadow))
	}
	c.RateLimitTimeout = duration("rate-limit-timeout", rateLimitTimeout, time.Millisecond)
	c.UserHeader, _ = value("user-header", userHeader)
	proxies, src := value("trusted-proxies", trustedProxies)
	for p := range strings.SplitSeq(proxies, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		prefix, err := netip.ParsePrefix(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not a CIDR prefix (example: 10.0.0.0/8, 127.0.0.1/32)", src, p))
			continue
		}
		c.TrustedProxies = append(c.TrustedProxies, prefix.Masked())
	}
	if c.UserHeader != "" && len(c.TrustedProxies) == 0 {
		errs = append(errs, fmt.Errorf("a user header (%s) needs trusted proxies: anyone could set it", c.UserHeader))
	}
	c.APIKeysFile, _ = value("api-keys-file", apiKeysFile)
	pp, src := value("pprof", pprof)
	if c.PProf, err = strconv.ParseBool(pp); err != nil {
		errs = append(errs, fmt.Errorf("%s: %q: want true or false", src, pp))
	}
	if c.PProf && c.APIKeysFile == "" && !loopback(c.Addr) {
		// Profiles show the whole process; with no key to ask for, only
		// the machine itself may see them.
		errs = append(errs, fmt.Errorf("%s: the profiler needs API keys (LOCKGW_API_KEYS_FILE) or a loopback listen address (LOCKGW_ADDR=127.0.0.1:8080), not %q", src, c.Addr))
	}

	level, src := value("log-level", logLevel)
	if c.LogLevel, err = zerolog.ParseLevel(level); err != nil || level == "" {
		errs = append(errs, fmt.Errorf("%s: unknown log level %q (want debug, info, warn or error)", src, level))
	}
	c.LogFormat, src = value("log-format", logFormat)
	if c.LogFormat != "json" && c.LogFormat != "console" {
		errs = append(errs, fmt.Errorf("%s: unknown log format %q (want json or console)", src, c.LogFormat))
	}

	c.DefaultTTL = duration("default-ttl", defaultTTL, 10*time.Millisecond)
	c.MaxTTL = duration("max-ttl", maxTTL, 10*time.Millisecond)
	if c.DefaultTTL > c.MaxTTL {
		errs = append(errs, fmt.Errorf("the default TTL %v is above the maximum TTL %v", c.DefaultTTL, c.MaxTTL))
	}
	c.MaxWait = duration("max-wait", maxWait, 0)
	c.BackendTimeout = duration("backend-timeout", backendTimeout, time.Millisecond)
	c.ShutdownTimeout = duration("shutdown-timeout", shutdownTimeout, 0)

	c.MemoryLimit, src = value("memory-limit", memoryLimit)
	if c.MemoryLimit != "auto" {
		if _, err := parseByteSize(c.MemoryLimit); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w, or auto", src, err))
		}
	}
	count := func(name string, p *string) int {
		v, src := value(name, p)
		if v == "auto" {
			return 0
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("%s: %q: want auto or a whole number of at least 1", src, v))
		}
		return n
	}
	c.MaxConns = count("max-conns", maxConns)
	c.MaxWaiting = count("max-waiting", maxWaiting)
	c.IdleTimeout = duration("idle-timeout", idleTimeout, time.Second)
	errs = parseLockCaps(&c, value, maxLocksPerUser, maxLocks, errs)

	body, src := value("max-body-bytes", maxBody)
	if c.MaxBodyBytes, err = strconv.ParseInt(body, 10, 64); err != nil || c.MaxBodyBytes < 1024 {
		errs = append(errs, fmt.Errorf("%s: %q is not a byte count of at least 1024", src, body))
	}
	return c, errors.Join(errs...)
}

// loopback reports whether addr (host:port) listens on loopback only: an
// empty host is every interface.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

func checkRedisURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
		return fmt.Errorf("%q is not a redis:// or rediss:// URL; write it as redis://host:port/db (example: redis://127.0.0.1:6379/0)", redactURL(raw))
	}
	return nil
}

func redlockList(raw, src string, errs []error) ([]string, []error) {
	var urls []string
	seen := map[string]bool{}
	entries := strings.Split(raw, ",")
	for i, u := range entries {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		if err := checkRedisURL(u); err != nil {
			errs = append(errs, fmt.Errorf("%s: entry %d of %d: %w", src, i+1, len(entries), err))
			continue
		}
		host := u
		if pu, err := url.Parse(u); err == nil {
			host = pu.Host
		}
		if seen[host] {
			errs = append(errs, fmt.Errorf("%s: %s is listed twice; Redlock needs independent masters", src, host))
		}
		seen[host] = true
		urls = append(urls, u)
	}
	if len(urls) < 3 {
		errs = append(errs, fmt.Errorf("%s: Redlock needs at least 3 independent Redis masters, got %d", src, len(urls)))
	}
	return urls, errs
}

// maxEchoedURL bounds how much of a URL an error message repeats.
const maxEchoedURL = 200

// redactURL hides a password in a Redis URL before it reaches an error or
// a log line. A URL net/url cannot parse is still shown, its password (the
// text between the user's ':' and the last '@') replaced, so the user can
// see which entry is wrong; it is cut to maxEchoedURL bytes.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err == nil {
		if u.User == nil {
			return truncate(raw)
		}
		return truncate(u.Redacted())
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		scheme, rest = "", raw
	} else {
		scheme += "://"
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if user, _, ok := strings.Cut(rest[:at], ":"); ok {
			rest = user + ":xxxxx" + rest[at:]
		}
	}
	return truncate(scheme + rest)
}

func truncate(s string) string {
	if len(s) <= maxEchoedURL {
		return s
	}
	s = s[:maxEchoedURL]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}
