package metrics

import (
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/prometheus/client_golang/prometheus"
)

// Votes are the votes a Redlock node casts in an acquire round
// (redlock.Options.OnVote).
var Votes = []string{"granted", "held", "timeout", "refused", "failed", "quarantined"}

// RedlockNodes exports each Redlock node's state, read from nodes when
// /metrics is scraped: lockgw_redlock_node_up (it answered its last call)
// and lockgw_redlock_node_quarantined (seen to restart, it does not count
// in quorums yet). Its votes' series start at 0, so that the first
// timeout or quarantine is an increase an alert sees.
func (m *Metrics) RedlockNodes(nodes func() []lockstore.NodeStatus) {
	for _, n := range nodes() {
		for _, v := range Votes {
			m.votes.WithLabelValues(n.Addr, v)
		}
	}
	m.reg.MustRegister(redlockNodes{
		nodes:       nodes,
		up:          prometheus.NewDesc("lockgw_redlock_node_up", "1 when the Redlock node answered the last call made to it, else 0.", []string{"node"}, nil),
		quarantined: prometheus.NewDesc("lockgw_redlock_node_quarantined", "1 while the Redlock node, seen to restart, does not count in quorums (it may have forgotten leases), else 0.", []string{"node"}, nil),
	})
}

type redlockNodes struct {
	nodes           func() []lockstore.NodeStatus
	up, quarantined *prometheus.Desc
}

func (c redlockNodes) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.up
	ch <- c.quarantined
}

func (c redlockNodes) Collect(ch chan<- prometheus.Metric) {
	for _, n := range c.nodes() {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, bool01(n.Up), n.Addr)
		ch <- prometheus.MustNewConstMetric(c.quarantined, prometheus.GaugeValue, bool01(!n.QuarantinedUntil.IsZero()), n.Addr)
	}
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// RedlockAdmission exports the Redlock admission of acquire rounds, read
// from read when /metrics is scraped (redlock.Store.Admission): the limit
// on rounds in flight (0: none, the nodes keep up), the rounds in flight,
// and the rounds refused (each a 503 that sent nothing). A limit above 0
// or a growing refused count says the nodes, or this gateway, are short of
// CPU or network for the acquires asked of them.
func (m *Metrics) RedlockAdmission(read func() (limit, inFlight int, refused uint64)) {
	m.reg.MustRegister(redlockAdmission{
		read:     read,
		limit:    prometheus.NewDesc("lockgw_redlock_admission_limit", "How many Redlock acquire rounds this gateway runs at once while its nodes are not keeping up; 0 when it runs all (no limit).", nil, nil),
		inFlight: prometheus.NewDesc("lockgw_redlock_admission_inflight", "Redlock acquire rounds in flight.", nil, nil),
		refused:  prometheus.NewDesc("lockgw_redlock_admission_refused_total", "Redlock acquire rounds refused, answered 503 before anything was sent, because the nodes were not keeping up.", nil, nil),
	})
}

type redlockAdmission struct {
	read                     func() (limit, inFlight int, refused uint64)
	limit, inFlight, refused *prometheus.Desc
}

func (c redlockAdmission) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.limit
	ch <- c.inFlight
	ch <- c.refused
}

func (c redlockAdmission) Collect(ch chan<- prometheus.Metric) {
	limit, inFlight, refused := c.read()
	ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(limit))
	ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(inFlight))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(refused))
}
