// Package server wires lockgateway together: configuration from flags and
// LOCKGW_* variables, the backend, the middleware and routes, and an
// http.Server that drains in-flight requests when its context ends.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"time"

	lockredis "github.com/lockgateway/lockgateway/lockstore/redis"
	"github.com/lockgateway/lockgateway/lockstore/redlock"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgateway/lockgateway"
	"github.com/lockgateway/lockgateway/handlers"
	"github.com/lockgateway/lockgateway/internal/tracing"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/memory"
	"github.com/lockgateway/lockgateway/metrics"
	"github.com/lockgateway/lockgateway/middleware"
	"github.com/lockgateway/lockgateway/ratelimit"
)

// deps is everything the routes need.
type deps struct {
	store   lockstore.Store
	sems    lockstore.Semaphores // nil: no /semaphores routes
	backend string
	nodes   func() []lockstore.NodeStatus // nil unless the backend has several nodes
	// topology is the redis backend's mode and shards for /readyz; nil
	// for the others.
	topology func(context.Context) lockstore.Topology
	limits   handlers.Limits
	log      zerolog.Logger
	spec     []byte
	stopping <-chan struct{}
	// clientAddr is the client's address, looked up only by the requests
	// that need it (the rate limit and the quota): ratelimit.PeerAddr, or
	// X-Forwarded-For read through the trusted proxies.
	clientAddr func(*http.Request) netip.Addr
	auth       func(http.Handler) http.Handler // nil without API keys
	// listAuth is auth for listings, whose prefix must lie inside the
	// user's prefixes; nil without API keys.
	listAuth func(http.Handler) http.Handler
	// whoAuth is auth for GET /whoami, which every known key may ask;
	// nil without API keys.
	whoAuth func(http.Handler) http.Handler
	lister  lockstore.Lister
	// pprofAuth guards the profiler: nil without API keys, when the
	// configuration allows pprof on a loopback address only.
	pprofAuth func(http.Handler) http.Handler
	limit     func(http.Handler) http.Handler // nil with rate limiting off
	check     func(http.Handler) http.Handler // the limiter for /ratelimit/check
	metrics   *metrics.Metrics
	// metricsApart: /metrics has a listener of its own (metrics-addr),
	// so the API's does not serve it.
	metricsApart bool
	pprof        bool
	// watch is the gateway's one hub for lock watchers, over the store
	// itself (its change signal), not the wait limit around it.
	watch *handlers.LockHub
	// semWatch is the same for semaphores (nil without them).
	semWatch *handlers.SemHub
	ui       bool
	// holdConns are the holds served on connections taken over from
	// net/http (handlers/hold_conn.go): the connection cap counts them,
	// and the shutdown waits for them. nil: holds stay with net/http.
	holdConns *handlers.HoldConns
	// tracing is nil with tracing off (tracing.go).
	tracing trace.TracerProvider
	uiAuto  bool // ui was left to auto (for the 404 that says why it is off)
}

// newHandler returns the gateway's HTTP handler: the middleware every
// request goes through, then the routes (routes.go).
func newHandler(d deps) http.Handler {
	r := chi.NewRouter()
	r.Use(
		middleware.RequestID,
		middleware.AccessLog(d.log),
	)
	if d.tracing != nil {
		r.Use(middleware.Trace(d.tracing, tracing.Propagator()))
	}
	r.Use(
		middleware.Observe(d.metrics.Request),
		middleware.Recoverer(d.log, handlers.InternalError()),
	)
	r.NotFound(handlers.NotFound().ServeHTTP)
	r.MethodNotAllowed(handlers.MethodNotAllowed(allowedMethods(r)).ServeHTTP)
	addRoutes(r, d)
	return r
}

// Run runs the gateway until ctx ends, then drains in-flight requests for
// up to the shutdown timeout and returns nil. args are the command-line
// arguments without the program name; getenv reads LOCKGW_* variables.
// Logs go to stdout; flag usage to stderr.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return run(ctx, args, getenv, stdout, stderr, runOptions{})
}

// runOptions are what tests give a gateway beyond its configuration.
type runOptions struct {
	// tracing replaces the provider the OTEL_* variables would make.
	tracing trace.TracerProvider
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, o runOptions) error {
	cfg, err := parseConfig(args, getenv, stderr)
	switch {
	case errors.Is(err, errHelp):
		printUsage(stdout)
		return nil
	case errors.Is(err, errVersion):
		fmt.Fprintf(stdout, "lockgateway %s\n", lockgateway.Version)
		return nil
	case err != nil:
		return err
	}
	logger, flushLog := newLogger(cfg, stdout)
	defer flushLog()
	bounds, err := setLimits(ctx, cfg, getenv, logger)
	if err != nil {
		return err
	}
	tp, stopTracing, err := startTracing(ctx, getenv, o.tracing, logger)
	if err != nil {
		return err
	}
	defer stopTracing()
	m := metrics.New()
	// go-redis has one logger per process, not per client: the last Run's
	// logger wins, which is only ever a concern in tests.
	redis.SetLogger(redisLogger{logger})

	store, nodes, err := openStore(cfg, bounds, logger, m, tracer(tp))
	if err != nil {
		return err
	}
	defer store.Close()

	waits := handlers.NewWaits(bounds.maxWaiting, m.WaitingRefused, tracer(tp))
	d := deps{
		store:   store,
		backend: cfg.Backend,
		nodes:   nodes,
		limits: handlers.Limits{
			DefaultTTL:     cfg.DefaultTTL,
			MaxTTL:         cfg.MaxTTL,
			MaxWait:        cfg.MaxWait,
			HoldTTL:        cfg.HoldTTL,
			MaxHold:        cfg.MaxHold,
			MaxBodyBytes:   cfg.MaxBodyBytes,
			BackendTimeout: cfg.BackendTimeout,
			Waits:          waits,
		},
		log:          logger,
		spec:         lockgateway.OpenAPI,
		clientAddr:   ratelimit.PeerAddr,
		metrics:      m,
		metricsApart: cfg.MetricsAddr != "",
		pprof:        cfg.PProf,
		watch:        lockstore.NewLockHub(store, cfg.BackendTimeout),
		ui:           cfg.UI,
		tracing:      tp,
		uiAuto:       cfg.uiAuto,
	}
	if t, ok := store.(lockstore.Topologist); ok {
		d.topology = t.Topology
	}
	if sems, ok := store.(lockstore.Semaphores); ok { // every backend has them
		m.Permits()
		d.sems = sems
		d.semWatch = lockstore.NewSemHub(sems, cfg.BackendTimeout)
	}
	if l, ok := store.(lockstore.Lister); ok { // every backend lists
		d.lister = l
	}
	if len(cfg.TrustedProxies) > 0 {
		d.clientAddr = ratelimit.AddrFrom(chimw.ClientIPFromXFF(prefixStrings(cfg.TrustedProxies)...))
	}
	if err := addAccessControl(&d, cfg, store); err != nil {
		return err
	}

	var certs *certFiles
	if cfg.TLSCert != "" {
		if certs, err = loadCertFiles(cfg.TLSCert, cfg.TLSKey, logger); err != nil {
			return err
		}
	}
	tcp, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	var base net.Listener = tcp
	if certs != nil {
		// TLS under the raw-error rewriting and the connection cap, so
		// that both see requests, not ciphertext.
		base = tls.NewListener(tcp, certs.tlsConfig())
	}
	ln := newConnLimit(rawErrorListener{base, logger}, bounds.maxConns, m.ConnectionReplaced)
	m.Bounds(ln.Open, waits.Waiting)
	m.Limits(bounds.maxConns, bounds.maxWaiting)
	m.Watching(func() (keys, watchers int) {
		keys, watchers = d.watch.Watchers()
		if d.semWatch != nil {
			k, w := d.semWatch.Watchers()
			keys, watchers = keys+k, watchers+w
		}
		return keys, watchers
	})

	stopping := make(chan struct{})
	d.stopping = stopping
	d.holdConns = handlers.NewHoldConns(ln.hijackedClosed)
	srv := &http.Server{
		Handler: newHandler(d),
		// A slow client holds a connection, not the service: headers must
		// arrive in 5 s and a body in 10 s.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		// A waiting acquire may take MaxWait plus one backend call; the
		// write deadline leaves room for both so a wait ends in a 409, not
		// a cut connection.
		WriteTimeout: cfg.MaxWait + cfg.BackendTimeout + 10*time.Second,
		// An idle keep-alive connection costs memory and a place under
		// the connection cap; a client that wants it kept sends a request.
		IdleTimeout:    cfg.IdleTimeout,
		ConnState:      ln.track,
		MaxHeaderBytes: maxHeaderBytes,
		ErrorLog:       log.New(logWriter{logger}, "", 0),
		// Lets an acquire see that its client left just before its grant.
		ConnContext: handlers.ConnContext,
	}

	serveErr := make(chan error, 2)
	if cfg.MetricsAddr != "" {
		msrv, err := serveMetrics(cfg.MetricsAddr, m, logger, serveErr)
		if err != nil {
			_ = ln.Close()
			return err
		}
		defer msrv.Close()
	}
	go func() { serveErr <- srv.Serve(ln) }()
	logExposure(logger, cfg, ln.Addr().String(), certs != nil)
	if cfg.Backend != BackendMemory {
		pingCtx, cancel := context.WithTimeout(ctx, cfg.BackendTimeout)
		if err := store.Ping(pingCtx); err != nil {
			logger.Warn().Err(err).Msg("backend does not answer yet; /readyz reports 503 until it does")
		}
		cancel()
	}

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}

	logger.Info().Dur("timeout", cfg.ShutdownTimeout).Msg("shutting down: draining in-flight requests")
	close(stopping) // waiting acquires answer 503 at once instead of holding the drain
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
		_ = d.holdConns.Wait(shutdownCtx) // over: closes them
		return fmt.Errorf("shutdown: requests still running after %v: %w", cfg.ShutdownTimeout, err)
	}
	// net/http waits for none of the holds served on their own
	// connections: each is sending its final event (shutdown).
	if err := d.holdConns.Wait(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: holds still open after %v: %w", cfg.ShutdownTimeout, err)
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	logger.Info().Msg("stopped")
	return nil
}

// logExposure says at start-up who can reach what: the address and
// scheme, whether a key is asked for, and what else the API's address
// serves; and warns of the combinations that are allowed but risky.
func logExposure(logger zerolog.Logger, cfg Config, addr string, https bool) {
	scheme, auth, reach := "http", "none", "this machine only (loopback)"
	if https {
		scheme = "https"
	}
	if cfg.APIKeysFile != "" {
		auth = "api-keys"
	}
	local := loopback(cfg.Addr)
	if !local {
		reach = "other machines too"
	}
	metricsAt := "the API's address, without a key"
	if cfg.MetricsAddr != "" {
		metricsAt = cfg.MetricsAddr
	}
	logger.Info().
		Str("addr", addr).
		Str("url", scheme+"://"+addr).
		Str("backend", cfg.Backend).
		Str("version", lockgateway.Version).
		Str("reachable_from", reach).
		Str("auth", auth).
		Bool("tls", https).
		Bool("ui", cfg.UI).
		Bool("pprof", cfg.PProf).
		Str("metrics", metricsAt).
		Msg("lockgateway listening")
	if local {
		return
	}
	if cfg.APIKeysFile == "" {
		logger.Warn().Str("addr", addr).
			Msg("serving other machines without API keys (LOCKGW_ALLOW_UNAUTHENTICATED): anyone who reaches this address can take and release every lock; make sure what is in front of the gateway authenticates")
	}
	if !https && cfg.APIKeysFile != "" {
		logger.Warn().Str("addr", addr).
			Msg("API keys travel in plain HTTP to other machines: serve HTTPS (LOCKGW_TLS_CERT, LOCKGW_TLS_KEY) or put a TLS proxy in front (docs/operations.md)")
	}
	if cfg.Backend == BackendMemory {
		logger.Warn().Str("addr", addr).
			Msg("the memory backend keeps locks in this process only: a second gateway (another replica) would grant the same key again; set LOCKGW_BACKEND=redis (or redlock) when more than one gateway serves these locks")
	}
}

// serveMetrics serves /metrics alone on addr (LOCKGW_METRICS_ADDR), for a
// Prometheus on a private network or loopback: the API's listener then
// does not serve it. A serve error is sent on errs.
func serveMetrics(addr string, m *metrics.Metrics, logger zerolog.Logger, errs chan<- error) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (--metrics-addr): %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          log.New(logWriter{logger}, "", 0),
	}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("metrics: %w", err)
		}
	}()
	logger.Info().Str("addr", ln.Addr().String()).Msg("metrics listening")
	return srv, nil
}

// newLogger returns the logger and a func that flushes it, for Run to
// call last. JSON lines are buffered (see bufferedLog); console output, for
// people watching, is not.
func newLogger(cfg Config, stdout io.Writer) (zerolog.Logger, func()) {
	if cfg.LogFormat == "console" {
		out := zerolog.ConsoleWriter{Out: stdout, TimeFormat: time.RFC3339}
		return zerolog.New(out).Level(cfg.LogLevel).Hook(&stampHook{}), func() {}
	}
	out := newBufferedLog(stdout)
	return zerolog.New(out).Level(cfg.LogLevel).Hook(&stampHook{}), func() { _ = out.Close() }
}

// openStore builds the configured backend. redis.Open and
// redlock.Open give their clients the options the stores rely on.
func openStore(cfg Config, b bounds, logger zerolog.Logger, m *metrics.Metrics, t trace.Tracer) (lockstore.Store, func() []lockstore.NodeStatus, error) {
	switch cfg.Backend {
	case BackendRedis:
		store, err := lockredis.Open(cfg.RedisURL, lockredis.Options{Mode: cfg.RedisMode, Timeout: cfg.BackendTimeout, WaitReplicas: cfg.RedisWaitReplicas, Tracer: t})
		if err != nil {
			return nil, nil, fmt.Errorf("--redis-url: %s: %w", redactURL(cfg.RedisURL), err)
		}
		return store, nil, nil
	case BackendRedlock:
		rl, err := redlock.Open(cfg.RedlockURLs, redlock.Options{
			NodeTimeout:       cfg.RedlockTimeout,
			NodeNames:         cfg.RedlockNames,
			PreviousURLs:      cfg.RedlockPreviousURLs,
			PreviousNodeNames: cfg.RedlockPreviousNames,
			MaxTTL:            cfg.MaxTTL, // a restarted node sits out the longest lease it may have forgotten
			Logger:            logger,
			OnVote:            m.Vote,
			Tracer:            t,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("--redlock-urls: %w", err)
		}
		// One server under two names would vote twice. Nodes that do not
		// answer yet are checked when they connect (and never count twice).
		checkCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = rl.CheckDistinct(checkCtx)
		cancel()
		if err != nil {
			_ = rl.Close()
			return nil, nil, fmt.Errorf("--redlock-urls: %w", err)
		}
		m.RedlockNodes(rl.Nodes)
		m.RedlockAdmission(func() (int, int, uint64) {
			a := rl.Admission()
			return a.Limit, a.InFlight, a.Refused
		})
		return rl, rl.Nodes, nil
	}
	return memory.NewWith(memory.Options{MaxLocks: b.maxLocks}), nil, nil
}

// logWriter sends net/http's own error lines (TLS handshakes, bad
// requests it answers itself) to zerolog.
type logWriter struct{ log zerolog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Warn().Str("source", "net/http").Msg(string(p))
	return len(p), nil
}

// redisLogger sends go-redis's own messages (failed dials, pool trouble)
// to zerolog instead of stderr.
type redisLogger struct{ log zerolog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn().Str("source", "go-redis").Msgf(format, v...)
}
