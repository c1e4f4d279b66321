package handlers

import (
	"net/http"

	"github.com/lockgateway/lockgateway/problem"
)

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
		k := problem.RateLimited
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
	return 0, newError(problem.Malformed, "refuse_status may be 429 (the default) or 403")
}
