package handlers

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/problem"
)

// Healthz serves GET /healthz: the process serves HTTP. It never asks the
// backend, so a Redis outage does not get healthy gateways restarted.
func Healthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		encode(w, http.StatusOK, "application/json", map[string]string{"status": "ok"})
	})
}

// Readyz serves GET /readyz: the backend answers within timeout. A load
// balancer should stop sending lock traffic to a gateway that answers 503.
// nodes, when not nil, lists a multi-node backend's nodes in the body;
// topology, when not nil (the redis backend), says its mode and, on a
// Cluster, how many shards answer, on Sentinel which master it follows.
func Readyz(store lockstore.Store, backend string, nodes func() []lockstore.NodeStatus, topology func(context.Context) lockstore.Topology, timeout time.Duration, log zerolog.Logger) http.Handler {
	type response struct {
		Status  string     `json:"status"`
		Backend string     `json:"backend"`
		Mode    string     `json:"mode,omitempty"`
		Master  string     `json:"master,omitempty"`
		Nodes   []nodeJSON `json:"nodes,omitempty"`
		// Pointers: a Cluster with no shard answering says 0.
		Shards   *int `json:"shards,omitempty"`
		ShardsUp *int `json:"shards_up,omitempty"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		err := store.Ping(ctx)
		var list []nodeJSON
		if nodes != nil {
			for _, n := range nodes() {
				out := nodeJSON{Addr: n.Addr, Up: n.Up, Quarantine: n.Quarantine}
				if !n.QuarantinedUntil.IsZero() {
					out.QuarantinedUntil = timestamp(n.QuarantinedUntil)
				}
				list = append(list, out)
			}
		}
		if err != nil {
			log.Warn().Err(err).Msg("readiness check failed")
			detail := "the " + backend + " backend does not answer; check that it runs and that this gateway reaches it (the gateway's log says what failed)"
			if q, ok := errors.AsType[quorumError](err); ok {
				detail = q.QuorumDetail()
			}
			if errors.Is(err, lockstore.ErrReplicas) {
				detail = "the redis backend answers, but fewer replicas acknowledge its writes than LOCKGW_REDIS_WAIT_REPLICAS asks for, so every acquire would be refused; check the replicas' links to the master (INFO replication on it)"
			}
			e := &Error{Kind: problem.Unavailable, Detail: detail, RetryAfter: time.Second, Nodes: list}
			if errors.Is(err, lockstore.ErrRefused) { // it answers, but could not take a lock
				refused := fromDomain(err)
				e.Kind, e.Detail = refused.Kind, refused.Detail
			}
			// The nodes matter most when the answer is no.
			WriteProblem(w, r, e)
			return
		}
		body := response{Status: "ok", Backend: backend, Nodes: list}
		if topology != nil {
			t := topology(ctx)
			body.Mode, body.Master = string(t.Mode), t.Master
			if t.Sharded {
				body.Shards, body.ShardsUp = &t.Shards, &t.ShardsUp
			}
		}
		encode(w, http.StatusOK, "application/json", body)
	})
}

// nodeJSON is a Node in /readyz bodies.
type nodeJSON struct {
	Addr             string `json:"addr"`
	Up               bool   `json:"up"`
	QuarantinedUntil string `json:"quarantined_until,omitempty"`
	Quarantine       string `json:"quarantine,omitempty"`
}
