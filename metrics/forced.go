package metrics

import "github.com/prometheus/client_golang/prometheus"

// newForced counts forced releases (handlers/force.go) by the user who
// made them and kind (lock, permit). It is the one metric labelled with a
// user: only users of the API keys file can release by force, a set the
// operator fixed, and an audit wants the name.
func newForced(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lockgw_forced_releases_total",
		Help: "Leases released by force (DELETE with force=true), by the API-key user who did it and kind: lock or permit.",
	}, []string{"user", "kind"})
	reg.MustRegister(c)
	return c
}

// Administrators exports lockgw_forced_releases_total at 0 for users, the
// API-key users that may release by force, so that an increase() alert
// sees the first.
func (m *Metrics) Administrators(users []string) {
	for _, u := range users {
		for _, kind := range []string{"lock", "permit"} {
			m.forced.WithLabelValues(u, kind)
		}
	}
}

// ForcedRelease counts user's forced release of a lease of kind.
func (m *Metrics) ForcedRelease(user, kind string) { m.forced.WithLabelValues(user, kind).Inc() }
