package server

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lockgateway/lockgateway/lockstore/redis"

	"github.com/rs/zerolog"

	"github.com/lockgateway/lockgateway/ratelimit"
)

// Config is the gateway's configuration. Every field comes from a flag or
// from the LOCKGW_* variable of the same name; a flag wins over the variable.
type Config struct {
	Addr           string
	MetricsAddr    string // "" serves /metrics on Addr
	Backend        string
	RedisURL       string
	RedisMode      redis.Mode
	RedlockURLs    []string
	RedlockTimeout time.Duration
	// RedlockNames name the nodes in the node list they remember, in the
	// order of RedlockURLs; nil: each URL's host:port/db.
	RedlockNames []string
	// RedlockPreviousURLs, during a change of the node list, is the list
	// the nodes served before (docs/safety.md, rule T); RedlockPreviousNames
	// names them as RedlockNames does. nil otherwise.
	RedlockPreviousURLs  []string
	RedlockPreviousNames []string
	RateLimitWindow      time.Duration
	RateLimitRoutes      string
	RateLimitFail        string // open or closed
	RateLimitShadow      bool
	RateLimitTimeout     time.Duration
	UserHeader           string
	TrustedProxies       []netip.Prefix
	APIKeysFile          string
	// AllowUnauthenticated lets a non-loopback Addr serve without API
	// keys: something in front (a proxy, a private network) authenticates.
	AllowUnauthenticated bool
	// TLSCert and TLSKey, both set, serve HTTPS with that pair, read again
	// when either file changes (tls.go).
	TLSCert, TLSKey string
	PProf           bool
	UI              bool // serve the dashboard at /ui/
	LogLevel        zerolog.Level
	LogFormat       string
	DefaultTTL      time.Duration
	MaxTTL          time.Duration
	MaxWait         time.Duration
	HoldTTL         time.Duration // a hold's lease length by default
	MaxHold         time.Duration // longest hold
	MaxBodyBytes    int64
	BackendTimeout  time.Duration
	ShutdownTimeout time.Duration
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
	// Replicas that must acknowledge a grant, renewal or extend of the
	// redis backend before it is answered (Redis WAIT); 0 answers at once.
	RedisWaitReplicas int

	redlockList string // as given; RedlockURLs once checked
	redlockPrev string // as given; RedlockPreviousURLs once checked
	uiAuto      bool   // UI was decided by auto
}

// Backends the gateway can run on.
const (
	BackendMemory  = "memory"
	BackendRedis   = "redis"
	BackendRedlock = "redlock"
)

// A setting is one flag and its LOCKGW_ variable: the one place its name,
// default and --help text are written. The configuration table in the docs
// is checked against this list (TestSettingsDocumented).
type setting struct {
	name string // the flag; the variable is LOCKGW_ + NAME_IN_CAPS
	def  string // the default, as a user would write it
	help string
	// set parses v into c. Settings listed earlier are already set. Its
	// error says what is wrong and what would be right; the source
	// (--flag or LOCKGW_VARIABLE) is prefixed to it.
	set func(c *Config, v string) error
}

func (s setting) env() string { return envName(s.name) }

func envName(flag string) string {
	return "LOCKGW_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// settings, in the order they are parsed: backend first, as the checks of
// later ones depend on it.
var settings = []setting{
	{"backend", BackendMemory, "lock backend: memory, redis or redlock", func(c *Config, v string) error {
		switch v {
		case BackendMemory, BackendRedis, BackendRedlock:
			c.Backend = v
			return nil
		}
		return fmt.Errorf("unknown backend %q (want memory, redis or redlock)", v)
	}},
	{"addr", "127.0.0.1:8080", "listen address; loopback by default: set 0.0.0.0:8080 (or an interface's address) to serve other machines, with API keys or --allow-unauthenticated", text(func(c *Config) *string { return &c.Addr })},
	{"tls-cert", "", "PEM certificate (chain) file: with --tls-key, serve HTTPS; both are read again when either changes", text(func(c *Config) *string { return &c.TLSCert })},
	{"tls-key", "", "PEM private key file of --tls-cert", text(func(c *Config) *string { return &c.TLSKey })},
	{"metrics-addr", "", "serve /metrics on this address only (e.g. 127.0.0.1:9090), not on --addr", text(func(c *Config) *string { return &c.MetricsAddr })},
	{"redis-url", "redis://127.0.0.1:6379/0", "Redis URL for the redis backend, in the form --redis-mode takes", text(func(c *Config) *string { return &c.RedisURL })},
	{"redis-mode", string(redis.Single), "how the redis backend reaches Redis: single, sentinel or cluster", func(c *Config, v string) error {
		if !slices.Contains(redis.Modes, redis.Mode(v)) {
			return fmt.Errorf("unknown Redis mode %q (want single, sentinel or cluster)", v)
		}
		c.RedisMode = redis.Mode(v)
		return nil
	}},
	{"redis-wait-replicas", "0", "redis backend: answer a grant or extend only once this many replicas acknowledged it (Redis WAIT, within --backend-timeout), else 503; 0 answers at once", func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		switch {
		case err != nil || n < 0:
			return fmt.Errorf("%q is not a replica count (0, 1, 2, …)", v)
		case n > 0 && c.Backend != BackendRedis:
			// Ignored, it would promise a safety the backend does not give.
			return fmt.Errorf("%d: only the redis backend waits for replicas, and the backend is %s; set LOCKGW_BACKEND=redis, or use 0", n, c.Backend)
		case n > 0 && c.RedisMode == redis.Cluster:
			return fmt.Errorf("%d: waiting for replicas works with --redis-mode single or sentinel, not cluster; use 0", n)
		}
		c.RedisWaitReplicas = n
		return nil
	}},
	{"redlock-urls", "", "comma-separated redis:// URLs of ≥ 3 independent masters", func(c *Config, v string) error {
		c.redlockList = v // checked with the backend (check)
		return nil
	}},
	{"redlock-node-names", "", "comma-separated names of the Redlock nodes, in the order of the URLs, for the node list the nodes remember (default: each URL's host:port/db)", func(c *Config, v string) error {
		c.RedlockNames = nodeNames(v)
		return nil
	}},
	{"redlock-previous-urls", "", "while changing the Redlock node list: the URLs of the list the nodes served before; a grant then needs a majority of both lists until the change finished", func(c *Config, v string) error {
		c.redlockPrev = v // checked with the backend (check)
		return nil
	}},
	{"redlock-previous-node-names", "", "names of the previous Redlock nodes, in the order of their URLs, as --redlock-node-names", func(c *Config, v string) error {
		c.RedlockPreviousNames = nodeNames(v)
		return nil
	}},
	{"redlock-node-timeout", "50ms", "deadline for one Redlock node in every operation", duration(time.Millisecond, func(c *Config) *time.Duration { return &c.RedlockTimeout })},
	{"rate-limit-window", "0", "per-user window, one request each; 0 turns rate limiting off", func(c *Config, v string) error {
		if err := duration(0, func(c *Config) *time.Duration { return &c.RateLimitWindow })(c, v); err != nil {
			return err
		}
		if c.RateLimitWindow > 0 && c.RateLimitWindow < 10*time.Millisecond {
			return fmt.Errorf("%v: use 0 (off) or at least 10ms", c.RateLimitWindow)
		}
		return nil
	}},
	{"rate-limit-routes", "PUT /locks/*", `comma-separated "METHOD /locks/..." routes the limit covers`, func(c *Config, v string) error {
		c.RateLimitRoutes = v
		if _, err := ratelimit.Routes(v); err != nil {
			return err
		}
		for r := range strings.SplitSeq(v, ",") {
			if _, path, _ := strings.Cut(strings.TrimSpace(r), " "); path != "" && !strings.HasPrefix(path, "/locks/") && !strings.HasPrefix(path, "/semaphores/") {
				return fmt.Errorf("%q: only /locks/ and /semaphores/ routes can be limited (the check endpoint always is)", r)
			}
		}
		return nil
	}},
	{"rate-limit-fail", "open", "when the store does not answer: open (admit) or closed (503)", oneOf(func(c *Config) *string { return &c.RateLimitFail }, "open", "closed")},
	{"rate-limit-shadow", "false", "log and send headers but never refuse", boolean(func(c *Config) *bool { return &c.RateLimitShadow })},
	{"rate-limit-timeout", "100ms", "deadline for one rate-limit store call", duration(time.Millisecond, func(c *Config) *time.Duration { return &c.RateLimitTimeout })},
	{"user-header", "", "header naming the user, honoured only from trusted proxies", text(func(c *Config) *string { return &c.UserHeader })},
	{"trusted-proxies", "", "comma-separated CIDRs whose X-Forwarded-For and user header are believed", func(c *Config, v string) error {
		var bad []string
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			prefix, err := netip.ParsePrefix(p)
			if err != nil {
				bad = append(bad, fmt.Sprintf("%q is not a CIDR prefix (example: 10.0.0.0/8, 127.0.0.1/32)", p))
				continue
			}
			c.TrustedProxies = append(c.TrustedProxies, prefix.Masked())
		}
		if len(bad) > 0 {
			return errors.New(strings.Join(bad, "; "))
		}
		return nil
	}},
	{"api-keys-file", "", "JSON file of users and key digests; set, every /locks request needs a key", text(func(c *Config) *string { return &c.APIKeysFile })},
	{"allow-unauthenticated", "false", "serve a non-loopback --addr without API keys: only when something in front of the gateway authenticates (a proxy, a private network)", boolean(func(c *Config) *bool { return &c.AllowUnauthenticated })},
	{"pprof", "false", "serve Go's profiler at /debug/pprof/, without cmdline; needs API keys or a loopback --addr", boolean(func(c *Config) *bool { return &c.PProf })},
	{"ui", "auto", "serve the live dashboard at /ui/: true, false, or auto (on when --addr is a loopback address)", func(c *Config, v string) error {
		if v == "auto" {
			// The page shows what the listing shows, every held key and
			// its owner, to whoever can reach it; on a loopback address
			// that is this machine only. Elsewhere, turn it on knowingly.
			c.UI, c.uiAuto = loopback(c.Addr), true
			return nil
		}
		return boolean(func(c *Config) *bool { return &c.UI })(c, v)
	}},
	{"log-level", "info", "debug, info, warn or error", func(c *Config, v string) error {
		level, err := zerolog.ParseLevel(v)
		if err != nil || v == "" {
			return fmt.Errorf("unknown log level %q (want debug, info, warn or error)", v)
		}
		c.LogLevel = level
		return nil
	}},
	{"log-format", "json", "json or console", func(c *Config, v string) error {
		c.LogFormat = v
		if v != "json" && v != "console" {
			return fmt.Errorf("unknown log format %q (want json or console)", v)
		}
		return nil
	}},
	{"default-ttl", "30s", "lease length when a request names none", duration(10*time.Millisecond, func(c *Config) *time.Duration { return &c.DefaultTTL })},
	{"max-ttl", "24h", "longest lease a request may ask for", duration(10*time.Millisecond, func(c *Config) *time.Duration { return &c.MaxTTL })},
	{"max-wait", "60s", "longest wait_ms a request may ask for", duration(0, func(c *Config) *time.Duration { return &c.MaxWait })},
	{"hold-ttl", "5s", "lease length of a hold (a PUT with Accept: text/event-stream) when it names none: how long a key outlives a gateway that died while holding it", duration(time.Second, func(c *Config) *time.Duration { return &c.HoldTTL })},
	{"max-hold", "24h", "longest a hold may last; max_hold_ms asks for less", duration(time.Second, func(c *Config) *time.Duration { return &c.MaxHold })},
	{"max-body-bytes", "65536", "request body limit in bytes", func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1024 {
			return fmt.Errorf("%q is not a byte count of at least 1024", v)
		}
		c.MaxBodyBytes = n
		return nil
	}},
	{"backend-timeout", "1s", "deadline for one backend call", duration(time.Millisecond, func(c *Config) *time.Duration { return &c.BackendTimeout })},
	{"shutdown-timeout", "15s", "how long a SIGTERM waits for in-flight requests", duration(0, func(c *Config) *time.Duration { return &c.ShutdownTimeout })},
	{"memory-limit", "auto", "Go's soft memory limit: auto (90% of the cgroup's limit, else of the machine's memory) or a size such as 512MiB", func(c *Config, v string) error {
		c.MemoryLimit = v
		if v != "auto" {
			if _, err := parseByteSize(v); err != nil {
				return fmt.Errorf("%w, or auto", err)
			}
		}
		return nil
	}},
	{"max-conns", "auto", fmt.Sprintf("most connections open at once; auto: one per %d KiB of the memory limit, %d to %d", connBudget>>10, minConns, maxConns),
		autoCount(func(c *Config) *int { return &c.MaxConns })},
	{"max-waiting", "auto", fmt.Sprintf("most acquires waiting at once; auto: one per %d KiB of the memory limit, %d to %d", waiterBudget>>10, minWaiting, maxWaiting),
		autoCount(func(c *Config) *int { return &c.MaxWaiting })},
	{"idle-timeout", "30s", "how long a keep-alive connection may sit idle", duration(time.Second, func(c *Config) *time.Duration { return &c.IdleTimeout })},
	{"max-locks-per-user", "auto", fmt.Sprintf("most live locks one user may hold; 0 is no cap; auto: %d, or no cap with redlock, which does not count yet", defaultMaxLocksPerUser), setMaxLocksPerUser},
	{"max-locks", "auto", fmt.Sprintf("memory backend: most live locks in all; auto: one per %d KiB of the memory limit, %d to %d", lockBudget>>10, minLocks, maxAutoLocks), setMaxLocks},
}

// The kinds of value most settings are.

func text(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *field(c) = v; return nil }
}

func duration(min time.Duration, field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			return fmt.Errorf("%q is not a duration (examples: 500ms, 30s, 24h)", v)
		case d < min:
			return fmt.Errorf("%v is below the minimum %v", d, min)
		}
		*field(c) = d
		return nil
	}
}

func boolean(field func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q: want true or false", v)
		}
		*field(c) = b
		return nil
	}
}

func oneOf(field func(*Config) *string, choices ...string) func(*Config, string) error {
	return func(c *Config, v string) error {
		if !slices.Contains(choices, v) {
			return fmt.Errorf("%q: want %s", v, strings.Join(choices, " or "))
		}
		*field(c) = v
		return nil
	}
}

// autoCount is "auto" (0: derived later) or a whole number of at least 1.
func autoCount(field func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		if v == "auto" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("%q: want auto or a whole number of at least 1", v)
		}
		*field(c) = n
		return nil
	}
}

// switches are the settings that are true or false (ui also auto): their
// flag alone, as --pprof, means true, as a Go bool flag does. Their
// variables still take a value (LOCKGW_PPROF=true).
var switches = map[string]bool{"rate-limit-shadow": true, "pprof": true, "ui": true, "allow-unauthenticated": true}

// flagText is a setting's flag: the text given, parsed with the variables
// once every flag is read.
type flagText struct {
	v       string
	switch_ bool
}

func (f *flagText) String() string     { return f.v }
func (f *flagText) Set(v string) error { f.v = v; return nil }
func (f *flagText) IsBoolFlag() bool   { return f.switch_ }

// errHelp and errVersion end parseConfig when --help or --version was
// given: Run prints what was asked for and returns nil (exit status 0).
var (
	errHelp    = flag.ErrHelp
	errVersion = errors.New("version requested")
)

// newFlagSet is the command line: one flag per setting, plus --version
// (and -h, --help, which the flag package knows).
func newFlagSet() (*flag.FlagSet, map[string]*flagText, *bool) {
	fs := flag.NewFlagSet("lockgateway", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned; --help is printed by printUsage
	fs.Usage = func() {}
	flags := make(map[string]*flagText, len(settings))
	for _, s := range settings {
		flags[s.name] = &flagText{v: s.def, switch_: switches[s.name]}
		fs.Var(flags[s.name], s.name, s.help+" ("+s.env()+")")
	}
	version := fs.Bool("version", false, "print the version and exit")
	return fs, flags, version
}

// printUsage writes --help's text to w: every setting with its variable
// and default, in the order they are parsed.
func printUsage(w io.Writer) {
	fmt.Fprint(w, "usage: lockgateway [--flag value]...\n\n"+
		"Serves leases (locks with a TTL) and fencing tokens over HTTP; see README.md and docs/.\n"+
		"Every flag is also a LOCKGW_* variable; a flag wins over its variable. The switches\n"+
		"(--allow-unauthenticated, --pprof, --rate-limit-shadow, --ui) alone mean true:\n"+
		"--pprof, or --pprof=false.\n\n")
	for _, s := range settings {
		name := "--" + s.name
		if !switches[s.name] {
			name += " value"
		}
		def := ""
		if s.def != "" {
			def = " (default " + s.def + ")"
		}
		fmt.Fprintf(w, "  %s, %s%s\n      %s\n", name, s.env(), def, s.help)
	}
	fmt.Fprint(w, "  --version\n      print the version and exit\n  --help\n      print this and exit\n")
}

// parseConfig reads flags from args and, for each flag not given, the
// LOCKGW_* variable from getenv. Nonsense is an error that says what is
// wrong and what would be right. --help and --version return errHelp and
// errVersion, for Run to answer.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	fs, flags, version := newFlagSet()
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Config{}, errHelp
		}
		return Config{}, fmt.Errorf("%w (lockgateway --help lists every flag)", err)
	}
	if *version {
		return Config{}, errVersion
	}
	if fs.NArg() > 0 {
		// A value after a switch, as in --pprof false, ends the flags.
		if i := len(args) - fs.NArg(); i > 0 {
			if name := strings.TrimLeft(args[i-1], "-"); switches[name] && strings.HasPrefix(args[i-1], "-") {
				return Config{}, fmt.Errorf("unexpected argument %q after --%s: a switch alone means true; give its value after =, as --%s=%s", fs.Arg(0), name, name, fs.Arg(0))
			}
		}
		return Config{}, fmt.Errorf("unexpected argument %q; every setting is a --flag (lockgateway --help lists them)", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })

	var c Config
	var errs []error
	src := make(map[string]string, len(settings)) // where each value came from
	for _, s := range settings {
		// The flag when given, else its variable when set, else the default.
		v, from := flags[s.name].v, "--"+s.name
		if env := getenv(s.env()); !given[s.name] && env != "" {
			v, from = env, s.env()
		}
		src[s.name] = from
		if err := s.set(&c, v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", from, err))
		}
	}
	if len(errs) > 0 {
		// The checks across settings would read the ones that failed as
		// zero, and blame the others ("the default TTL is above the
		// maximum TTL 0s"): fix these first.
		return c, errors.Join(errs...)
	}
	errs = append(errs, check(&c, src, func(name string) bool { return given[name] || getenv(envName(name)) != "" })...)
	return c, errors.Join(errs...)
}

// check finds what is wrong with settings together. src names where each
// value came from; set reports whether the user set one at all.
func check(c *Config, src map[string]string, set func(name string) bool) []error {
	var errs []error
	// A Redis address with no backend named would otherwise serve the
	// memory backend without a word: locks a user believes are shared
	// would live in one process. Refuse, and say what to set.
	if !set("backend") {
		for _, n := range []struct{ flag, backend string }{{"redis-url", BackendRedis}, {"redlock-urls", BackendRedlock}} {
			if set(n.flag) {
				errs = append(errs, fmt.Errorf("%s is set but no backend is chosen, so it would be ignored and locks kept in this process's memory; set LOCKGW_BACKEND=%s (or --backend %s), or unset %s to use the memory backend",
					src[n.flag], n.backend, n.backend, src[n.flag]))
			}
		}
	}
	switch c.Backend {
	case BackendRedis:
		if c.RedisMode == redis.Single {
			if err := checkRedisURL(c.RedisURL); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", src["redis-url"], err))
			}
		}
	case BackendRedlock:
		c.RedlockURLs, errs = redlockList(c.redlockList, src["redlock-urls"], errs)
		if strings.TrimSpace(c.redlockPrev) != "" {
			c.RedlockPreviousURLs, errs = redlockList(c.redlockPrev, src["redlock-previous-urls"], errs)
		}
	}
	if c.UserHeader != "" && len(c.TrustedProxies) == 0 {
		errs = append(errs, fmt.Errorf("%s (%s) needs trusted proxies (LOCKGW_TRUSTED_PROXIES): anyone could set it", src["user-header"], c.UserHeader))
	}
	if !loopback(c.Addr) && c.APIKeysFile == "" && !c.AllowUnauthenticated {
		// Anyone who reaches the address could take and release every
		// lock; nothing the gateway could notice later would undo that.
		errs = append(errs, fmt.Errorf("%s: %q accepts connections from other machines, and no API keys are set, so anyone who reaches it could take and release every lock. "+
			"Set API keys (LOCKGW_API_KEYS_FILE, docs/rate-limiting.md), or, when something in front of the gateway authenticates (a proxy, a private network), set LOCKGW_ALLOW_UNAUTHENTICATED=true (--allow-unauthenticated); "+
			"or listen on loopback only (LOCKGW_ADDR=127.0.0.1:8080, the default)", src["addr"], c.Addr))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, fmt.Errorf("HTTPS needs both a certificate and its key: set LOCKGW_TLS_CERT and LOCKGW_TLS_KEY (--tls-cert, --tls-key), or neither for plain HTTP"))
	}
	if c.PProf && c.APIKeysFile == "" && !loopback(c.Addr) {
		// Profiles show the whole process; with no key to ask for, only
		// the machine itself may see them.
		errs = append(errs, fmt.Errorf("%s: the profiler needs API keys (LOCKGW_API_KEYS_FILE) or a loopback listen address (LOCKGW_ADDR=127.0.0.1:8080), not %q", src["pprof"], c.Addr))
	}
	if c.DefaultTTL > c.MaxTTL {
		errs = append(errs, fmt.Errorf("the default TTL %v is above the maximum TTL %v", c.DefaultTTL, c.MaxTTL))
	}
	if c.MetricsAddr != "" && c.MetricsAddr == c.Addr {
		errs = append(errs, fmt.Errorf("%s: %q is the API's address too; give /metrics an address of its own, or leave it unset to serve /metrics with the API", src["metrics-addr"], c.MetricsAddr))
	}
	return errs
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

// nodeNames splits a comma-separated list of node names; nil when empty.
func nodeNames(v string) []string {
	var names []string
	if v = strings.TrimSpace(v); v != "" {
		for n := range strings.SplitSeq(v, ",") {
			names = append(names, strings.TrimSpace(n))
		}
	}
	return names
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
