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
