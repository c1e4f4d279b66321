// Package metrics exports what operators of a lock service watch, in the
// Prometheus format at /metrics: how long acquires take and how they end,
// how long clients wait and hold locks, contention, leases found gone,
// how semaphore permit operations end, rate-limit decisions, backend
// errors and refusals, and Redlock's per-node votes.
//
// Labels never carry a lock key, a user or a token: those are unbounded,
// and the last two are secrets. A Redlock node's address is a label: there
// are a handful, fixed by configuration. So is, on forced releases alone,
// the API-key user who made one: the keys file fixes the set (forced.go).
package metrics

import (
	"hash/maphash"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lockgateway/lockgateway/internal/expiry"
)

// Metrics holds the gateway's collectors, on a registry of its own (no
// package globals: two gateways in one test process do not share counts).
type Metrics struct {
	reg *prometheus.Registry

	acquire   *prometheus.HistogramVec
	wait      *prometheus.HistogramVec
	hold      prometheus.Histogram
	conflicts prometheus.Counter
	gone      *prometheus.CounterVec
	backend   *prometheus.CounterVec
	refused   *prometheus.CounterVec
	ratelimit *prometheus.CounterVec
	votes     *prometheus.CounterVec
	requests  *prometheus.HistogramVec
	replaced  prometheus.Counter
	crowded   prometheus.Counter

	// The series a request touches, looked up once rather than hashed from
	// their labels on every request. series is copied on write: a new
	// series is rare (the set is bounded), a lookup is every request's,
	// and a plain map's hashes a key faster than sync.Map's.
	outcomes  map[string]prometheus.Observer
	series    atomic.Pointer[map[requestSeries]prometheus.Observer]
	addSeries sync.Mutex

	holds   *holds
	streams *holdStreams           // holds on a stream (holdstreams.go)
	forced  *prometheus.CounterVec // forced releases (forced.go)

	// Semaphore permits' (semaphores.go), made by the first Semaphores call.
	permitsOnce   sync.Once
	permitAcquire *prometheus.HistogramVec
	permitOps     *prometheus.CounterVec
}

type requestSeries struct {
	route, method string
	status        int
}

// Buckets from 0.5 ms (a loopback Redis round trip) to a minute (the
// longest wait).
var latencyBuckets = prometheus.ExponentialBucketsRange(0.0005, 60, 16)

// New returns the collectors, registered with Go runtime and process
// metrics.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{
		reg: reg,
		acquire: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lockgw_acquire_duration_seconds",
			Help:    "Time to answer an acquire, waiting included, by outcome: acquired, renewed, held, over_quota, full, too_many_waiters, unavailable, error.",
			Buckets: latencyBuckets,
		}, []string{"outcome"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lockgw_wait_seconds",
			Help:    "Time waiting acquires waited, by outcome: granted, timed_out, abandoned.",
			Buckets: latencyBuckets,
		}, []string{"outcome"}),
		hold: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "lockgw_hold_seconds",
			Help:    "Time from a grant to its release, for releases through the gateway that granted.",
			Buckets: prometheus.ExponentialBucketsRange(0.001, 86400, 20),
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockgw_conflicts_total",
			Help: "Acquires answered 409 because another token held the key (contention).",
		}),
		gone: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockgw_lock_gone_total",
			Help: "Extends and releases that found the lock gone (it expired before its holder acted), by op.",
		}, []string{"op"}),
		backend: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockgw_backend_errors_total",
			Help: "Operations the backend did not answer in time, by op.",
		}, []string{"op"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockgw_backend_refusals_total",
			Help: "Operations the backend answered but refused to write, by op and reason: oom (out of memory), readonly (a replica), misconf (cannot persist), noreplicas, busy (a long script). Each needs an operator.",
		}, []string{"op", "reason"}),
		ratelimit: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockgw_ratelimit_decisions_total",
			Help: "Rate-limit decisions: admitted, refused, refused_cached (no store round trip), shadow_refused, error.",
		}, []string{"decision"}),
		votes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockgw_redlock_votes_total",
			Help: "Redlock nodes' votes in acquire rounds: granted, held, timeout, refused, failed, quarantined.",
		}, []string{"node", "vote"}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lockgw_http_request_duration_seconds",
			Help:    "HTTP requests by route pattern, method and status.",
			Buckets: latencyBuckets,
		}, []string{"route", "method", "status"}),
		replaced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockgw_connections_replaced_total",
			Help: "Idle connections closed to make room for a new one at LOCKGW_MAX_CONNS.",
		}),
		crowded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockgw_waiting_refused_total",
			Help: "Acquires that would have waited, refused (503 too-many-waiters) because LOCKGW_MAX_WAITING acquires were waiting.",
		}),
		holds: newHolds(1 << 17),
	}
	reg.MustRegister(m.acquire, m.wait, m.hold, m.conflicts, m.gone, m.backend, m.refused, m.ratelimit, m.votes, m.requests,
		m.replaced, m.crowded)
	m.streams = newHoldStreams(reg)
	m.forced = newForced(reg)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lockgw_leases_granted_live",
		Help: "Leases this gateway granted that are neither released through it nor expired, as far as it knows (at most 131072 are tracked).",
	}, func() float64 { return float64(m.holds.live()) }))
	m.series.Store(&map[requestSeries]prometheus.Observer{})
	m.outcomes = make(map[string]prometheus.Observer)
	for _, o := range []string{"acquired", "renewed", "held", "over_quota", "full", "too_many_waiters", "unavailable", "error"} {
		m.outcomes[o] = m.acquire.WithLabelValues(o)
	}
	m.zeroSeries()
	return m
}

// The label values the counters take, known up front.
var (
	// ops that can find a lock gone, or its backend not answering.
	leaseOps = []string{"extend", "release"}
	// RefusalReasons are lockstore.RefusedError's reasons.
	RefusalReasons = []string{"oom", "readonly", "misconf", "noreplicas", "busy"}
	// RateLimitDecisions are ratelimit.Options.Observe's decisions.
	RateLimitDecisions = []string{"admitted", "refused", "refused_cached", "shadow_refused", "error"}
)

// zeroSeries makes every series whose labels are known up front, so that
// /metrics shows it at 0 from the start: an alert on increase() or rate()
// sees the first event (a series born at 1 has no increase), and a
// dashboard shows 0 rather than "no data".
func (m *Metrics) zeroSeries() {
	for _, op := range leaseOps {
		m.gone.WithLabelValues(op)
		m.backend.WithLabelValues(op)
	}
	for _, op := range []string{"acquire", "extend", "release"} {
		for _, reason := range RefusalReasons {
			m.refused.WithLabelValues(op, reason)
		}
	}
	for _, d := range RateLimitDecisions {
		m.ratelimit.WithLabelValues(d)
	}
	for _, o := range []string{"granted", "timed_out", "abandoned"} {
		m.wait.WithLabelValues(o)
	}
}

// Handler serves the metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Acquired records an acquire's outcome, and its wait when it waited.
func (m *Metrics) Acquired(outcome string, took time.Duration, waited bool) {
	obs, ok := m.outcomes[outcome]
	if !ok {
		obs = m.acquire.WithLabelValues(outcome)
	}
	obs.Observe(took.Seconds())
	if outcome == "held" {
		m.conflicts.Inc()
	}
	if !waited {
		return
	}
	switch outcome {
	case "acquired", "renewed":
		m.wait.WithLabelValues("granted").Observe(took.Seconds())
	case "held":
		m.wait.WithLabelValues("timed_out").Observe(took.Seconds())
	default:
		m.wait.WithLabelValues("abandoned").Observe(took.Seconds())
	}
}

// Granted starts the hold clock of a lease that lasts until expires.
func (m *Metrics) Granted(token string, expires time.Time) { m.holds.start(token, expires) }

// Extended moves a tracked lease's end.
func (m *Metrics) Extended(token string, expires time.Time) { m.holds.extend(token, expires) }

// Released records the hold time of a lease this gateway granted.
func (m *Metrics) Released(token string) {
	if d, ok := m.holds.stop(token); ok {
		m.hold.Observe(d.Seconds())
	}
}

// LockGone counts an extend or release that found the lock gone.
func (m *Metrics) LockGone(op string) { m.gone.WithLabelValues(op).Inc() }

// BackendError counts an operation the backend did not answer.
func (m *Metrics) BackendError(op string) { m.backend.WithLabelValues(op).Inc() }

// Refused counts an operation whose write the backend refused.
func (m *Metrics) Refused(op, reason string) { m.refused.WithLabelValues(op, reason).Inc() }

// Bounds exports what the gateway holds against its bounds: connections
// open and acquires waiting, read when /metrics is scraped.
func (m *Metrics) Bounds(conns, waiting func() int) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lockgw_connections_open",
			Help: "Client connections open, of at most LOCKGW_MAX_CONNS.",
		}, func() float64 { return float64(conns()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lockgw_waiting_acquires",
			Help: "Acquires waiting for a lock, of at most LOCKGW_MAX_WAITING.",
		}, func() float64 { return float64(waiting()) }),
	)
}

// Watching exports the watch hub's size (docs/api.md, "Watching"): keys
// watched through this gateway, and the long-polls and streams watching
// them, read when /metrics is scraped.
func (m *Metrics) Watching(watched func() (keys, watchers int)) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lockgw_watched_keys",
			Help: "Keys watched through this gateway: one backend subscription and reader each.",
		}, func() float64 { k, _ := watched(); return float64(k) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lockgw_watchers",
			Help: "Long-polls and event streams watching a key.",
		}, func() float64 { _, w := watched(); return float64(w) }),
	)
}

// ConnectionReplaced counts an idle connection closed to make room.
func (m *Metrics) ConnectionReplaced() { m.replaced.Inc() }

// WaitingRefused counts an acquire refused a place among the waiters.
func (m *Metrics) WaitingRefused() { m.crowded.Inc() }

// RateLimit counts a rate-limit decision.
func (m *Metrics) RateLimit(decision string) { m.ratelimit.WithLabelValues(decision).Inc() }

// Vote counts a Redlock node's vote.
func (m *Metrics) Vote(node, vote string) { m.votes.WithLabelValues(node, vote).Inc() }

// Request records an HTTP request.
func (m *Metrics) Request(route, method string, status int, took time.Duration) {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodPost, http.MethodOptions:
	default:
		method = "other" // the client chooses it: never an unbounded label
	}
	key := requestSeries{route, method, status}
	obs, ok := (*m.series.Load())[key]
	if !ok {
		obs = m.newSeries(key)
	}
	obs.Observe(took.Seconds())
}

// newSeries adds key's series. Bounded: route patterns are the router's,
// methods the few Request keeps, statuses the ones the gateway answers.
func (m *Metrics) newSeries(key requestSeries) prometheus.Observer {
	m.addSeries.Lock()
	defer m.addSeries.Unlock()
	old := *m.series.Load()
	if obs, ok := old[key]; ok {
		return obs
	}
	obs := m.requests.WithLabelValues(key.route, key.method, strconv.Itoa(key.status))
	series := maps.Clone(old)
	series[key] = obs
	m.series.Store(&series)
	return obs
}

// holds remembers when leases granted by this gateway started, keyed by a
// digest of their token, until they are released or run out; bounded, so a
// flood of leases that are never released costs a fixed amount of memory.
type holds struct {
	mu     sync.Mutex
	max    int
	seeds  [2]maphash.Seed
	leases map[digest]*hold
	queue  expiry.Queue[digest]
}

// digest stands for a token in holds: two 64-bit hashes with seeds of this
// process's own, so the token itself is never kept, nobody who does not
// know the seeds can make two tokens collide, and by chance two live
// leases do so about once in 2^128 pairs (a collision would only misfile
// one hold time). It replaced SHA-256, whose two sums cost about 5 200
// instructions of a cycle's 111 000 in BenchmarkCycle.
type digest [2]uint64

func (h *holds) digest(token string) digest {
	return digest{maphash.String(h.seeds[0], token), maphash.String(h.seeds[1], token)}
}

type hold struct {
	start time.Time
	end   *expiry.Entry[digest]
}

func newHolds(max int) *holds {
	return &holds{max: max, seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, leases: make(map[digest]*hold)}
}

func (h *holds) start(token string, expires time.Time) {
	d := h.digest(token)
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.queue.PopExpired(now, func(k digest) { delete(h.leases, k) })
	if _, ok := h.leases[d]; ok || len(h.leases) >= h.max {
		return // a renewal keeps its start; a full table skips the lease
	}
	// expires is a wall-clock time; measure the lease's end on the
	// monotonic clock from now.
	h.leases[d] = &hold{start: now, end: h.queue.Add(d, now.Add(time.Until(expires)))}
}

// live is how many tracked leases have not run out.
func (h *holds) live() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.queue.PopExpired(time.Now(), func(k digest) { delete(h.leases, k) })
	return len(h.leases)
}

func (h *holds) extend(token string, expires time.Time) {
	d := h.digest(token)
	h.mu.Lock()
	defer h.mu.Unlock()
	if l, ok := h.leases[d]; ok {
		h.queue.Move(l.end, time.Now().Add(time.Until(expires)))
	}
}

func (h *holds) stop(token string) (time.Duration, bool) {
	d := h.digest(token)
	h.mu.Lock()
	defer h.mu.Unlock()
	l, ok := h.leases[d]
	if !ok {
		return 0, false
	}
	h.queue.Remove(l.end)
	delete(h.leases, d)
	return time.Since(l.start), true
}
