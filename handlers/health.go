package handlers

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockgateway/lockgateway/lockstore"
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
// nodes, when not nil, lists a multi-node backend's nodes in the body.
func Readyz(store lockstore.Store, backend string, nodes func() []lockstore.NodeStatus, timeout time.Duration, log zerolog.Logger) http.Handler {
	type response struct {
		Status  string     `json:"status"`
		Backend string     `json:"backend"`
		Nodes   []nodeJSON `json:"nodes,omitempty"`
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
			detail := "the " + backend + " backend does not answer"
			if q, ok := errors.AsType[quorumError](err); ok {
				detail = q.QuorumDetail()
			}
			e := &Error{Kind: KindUnavailable, Detail: detail, RetryAfter: time.Second, Nodes: list}
			if errors.Is(err, lockstore.ErrRefused) { // it answers, but could not take a lock
				refused := fromDomain(err)
				e.Kind, e.Detail = refused.Kind, refused.Detail
			}
			// The nodes matter most when the answer is no.
			WriteProblem(w, r, e)
			return
		}
		encode(w, http.StatusOK, "application/json", response{Status: "ok", Backend: backend, Nodes: list})
	})
}

// nodeJSON is a Node in /readyz bodies.
type nodeJSON struct {
	Addr             string `json:"addr"`
	Up               bool   `json:"up"`
	QuarantinedUntil string `json:"quarantined_until,omitempty"`
	Quarantine       string `json:"quarantine,omitempty"`
}

// OpenAPI serves GET /openapi.yaml: the spec the service was built with.
func OpenAPI(spec []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Header().Set("Content-Length", strconv.Itoa(len(spec)))
		_, _ = w.Write(spec)
	})
}

// NotFound answers paths the API does not have.
func NotFound() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteProblem(w, r, newError(KindNotFound, "no such resource; see /openapi.yaml for the API"))
	})
}

// MethodNotAllowed answers a known path asked with a method it lacks;
// allowed lists the methods the path has, for the Allow header.
func MethodNotAllowed(allowed func(r *http.Request) []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		allow := strings.Join(allowed(r), ", ")
		w.Header().Set("Allow", allow)
		WriteProblem(w, r, newError(KindMethodNotAllowed, r.Method+" is not allowed here; allowed: "+allow))
	})
}

// InternalError answers a request whose handler failed unexpectedly.
func InternalError() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteProblem(w, r, newError(KindInternal, "the server could not handle the request; quote the request_id when reporting it"))
	})
}

// Admitted serves GET /ratelimit/check behind the rate limiter: reaching it
// means the request was admitted. Forward-auth gateways (Traefik, Envoy
// ext_authz, nginx auth_request) call it before passing a request on.
func Admitted() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := refuseStatus(r); err != nil {
			WriteProblem(w, r, err)
			return
		}
		encode(w, http.StatusOK, "application/json", map[string]string{"status": "admitted"})
	})
}

// CheckRefused answers a refused /ratelimit/check: 429, or the status the
// query asks for with refuse_status=403. nginx's auth_request turns any
// refusal but 401 and 403 into a 500, so an nginx in front asks for 403 and
// maps it back to 429 itself (see examples/nginx).
func CheckRefused(detail string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, err := refuseStatus(r)
		if err != nil {
			WriteProblem(w, r, err)
			return
		}
		k := KindRateLimited
		k.Status = status
		WriteProblem(w, r, newError(k, detail))
	})
}

func refuseStatus(r *http.Request) (int, *Error) {
	switch r.URL.Query().Get("refuse_status") {
	case "", "429":
		return http.StatusTooManyRequests, nil
	case "403":
		return http.StatusForbidden, nil
	}
	return 0, newError(KindMalformed, "refuse_status may be 429 (the default) or 403")
}
