package metrics

import "github.com/prometheus/client_golang/prometheus"

// holdStreams meters holds (handlers/hold.go): leases kept for as long as
// a client's stream stays open.
type holdStreams struct {
	open prometheus.Gauge
	ends *prometheus.CounterVec
}

// holdEndReasons are the reasons a hold ends, each exported at 0 from the
// start, so that an increase() alert sees the first one.
var holdEndReasons = []string{"released", "max-hold", "shutdown", "client-gone", "backend-unavailable", "expired", "taken", "forced"}

func newHoldStreams(reg prometheus.Registerer) *holdStreams {
	h := &holdStreams{
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lockgw_holds_open",
			Help: "Holds (PUT with Accept: text/event-stream) whose stream is open on this gateway.",
		}),
		ends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockgw_hold_ends_total",
			Help: "Holds ended, by reason: released (the holder's DELETE), max-hold, shutdown, client-gone (the client closed the stream), and the lost ones: backend-unavailable (no renewal confirmed in time), expired, taken, forced (an administrator's forced release).",
		}, []string{"reason"}),
	}
	for _, r := range holdEndReasons {
		h.ends.WithLabelValues(r)
	}
	reg.MustRegister(h.open, h.ends)
	return h
}

// HoldStarted counts a hold's stream opening.
func (m *Metrics) HoldStarted() { m.streams.open.Inc() }

// HoldEnded counts a hold's end, for reason.
func (m *Metrics) HoldEnded(reason string) {
	m.streams.open.Dec()
	m.streams.ends.WithLabelValues(reason).Inc()
}
