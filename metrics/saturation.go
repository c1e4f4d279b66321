package metrics

import "github.com/prometheus/client_golang/prometheus"

// Limits exports the bounds the gateway runs with (LOCKGW_MAX_CONNS and
// LOCKGW_MAX_WAITING, as set or as derived from the memory limit), beside
// lockgw_connections_open and lockgw_waiting_acquires: a dashboard or an
// alert divides one by the other for saturation without knowing the
// configuration.
func (m *Metrics) Limits(maxConns, maxWaiting int) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lockgw_connections_max",
			Help: "The most client connections the gateway keeps open (LOCKGW_MAX_CONNS).",
		}, func() float64 { return float64(maxConns) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lockgw_waiting_max",
			Help: "The most acquires that may wait at once (LOCKGW_MAX_WAITING).",
		}, func() float64 { return float64(maxWaiting) }),
	)
}
