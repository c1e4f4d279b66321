package handlers

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/middleware"
	"github.com/lockgateway/lockgateway/problem"
)

// A forced release, DELETE /locks/{key}?force=true (or
// /semaphores/{key}?force=true&fence=N), frees a lease without its token:
// for a holder that crashed with a long TTL, whose token nobody can learn.
// Only an API key that administers the key may ("admin_prefixes" in the
// keys file; middleware.Administers): without API keys nobody may. It is
// audited: a warning in the log naming the user, the key, and the fence
// and owner released; lockgw_forced_releases_total{user,kind}; the
// access log's "force":true. The store releases exactly the lease it
// reads (lockstore.Forcer), so the next holder's fence is higher, and a
// hold of that lease on this gateway ends at once: lost, reason forced.

// forceQuery reads a DELETE's force and fence parameters; a DELETE
// without a query string (an ordinary release) costs nothing here.
// Other parameters are ignored, as they always were on a DELETE.
func forceQuery(r *http.Request) (force bool, fence int64, err error) {
	if r.URL.RawQuery == "" {
		return false, 0, nil
	}
	values, perr := url.ParseQuery(r.URL.RawQuery)
	if perr != nil {
		return false, 0, newError(problem.Malformed, "the query string is malformed")
	}
	for _, name := range []string{"force", "fence"} {
		if len(values[name]) > 1 {
			return false, 0, newError(problem.Malformed, "the query parameter "+name+" is given more than once; give it once")
		}
	}
	if v, ok := values["force"]; ok {
		switch v[0] {
		case "true":
			force = true
		case "false":
		default:
			return false, 0, newError(problem.Malformed, "force must be true or false")
		}
	}
	if v, ok := values["fence"]; ok {
		if !force {
			return false, 0, newError(problem.Malformed, "fence names the lease a forced release frees: send it with force=true")
		}
		n, err := strconv.ParseInt(v[0], 10, 64)
		if err != nil || n < 1 || n > maxFence {
			return false, 0, newError(problem.Malformed, "fence must be a lease's fence, a whole number from 1, as GET shows it")
		}
		fence = n
	}
	return force, fence, nil
}

// maxFence is the largest fence a store hands out (docs/api.md: fences stay
// below 2^53).
const maxFence = 1<<53 - 1

// forceRelease serves a DELETE with force=true: of a lock's lease (fence
// 0: whichever holds it), or of the permit of fence (permit).
func (h *Locks) forceRelease(w http.ResponseWriter, r *http.Request, forcer lockstore.Forcer, permit bool, fence int64) {
	key, err := KeyFromPath(r)
	if err != nil {
		WriteError(w, r, h.log, err)
		return
	}
	if len(r.Header[hdrLockToken]) > 0 || len(r.Header[hdrIfMatch]) > 0 {
		WriteError(w, r, h.log, newError(problem.Malformed, "force=true releases a lease without its token: send one or the other. "+
			"To release your own lease, send its token without force; to release another's, force=true without a token"))
		return
	}
	if permit && fence == 0 {
		WriteError(w, r, h.log, newError(problem.Malformed, "a permit is named by its fence: add fence=<the permit's fence>, as GET /semaphores/{key} shows it"))
		return
	}
	user := middleware.GetPrincipal(r.Context())
	if !middleware.Administers(r.Context(), key) {
		detail := `a forced release needs an API key that administers the key: one whose "admin_prefixes" in the API keys file cover it; yours does not`
		if user == "" {
			detail = `a forced release needs an API key that administers the key ("admin_prefixes" in the API keys file); this gateway has no API keys (LOCKGW_API_KEYS_FILE), so nobody may release by force`
		}
		WriteError(w, r, h.log, newError(problem.Forbidden, detail))
		return
	}
	if forcer == nil {
		WriteError(w, r, h.log, errors.New("handlers: the store cannot release by force"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.limits.BackendTimeout)
	defer cancel()
	kind, what := "lock", "lease"
	var owner string
	if permit {
		kind, what = "permit", "permit"
		var p lockstore.Permit
		if p, err = forcer.SemForceRelease(ctx, key, fence); err == nil {
			owner = p.Owner
		}
	} else {
		var l lockstore.Lease
		if l, err = forcer.ForceRelease(ctx, key, fence); err == nil {
			fence, owner = l.Fence, l.Owner
		}
	}
	switch {
	case errors.Is(err, lockstore.ErrNotHeld):
		detail := "no lease to release: the lock is not held (never taken, released, or expired), or the lease read ended while it was being released; nothing was released"
		if fence != 0 {
			detail = "no " + what + " with fence " + strconv.FormatInt(fence, 10) + " is held: it was released, expired, or another holds the key now; nothing was released"
		}
		WriteError(w, r, h.log, newError(problem.LockNotFound, detail))
		return
	case err != nil:
		WriteError(w, r, h.log, err)
		return
	}
	h.log.Warn().
		Str("user", user).
		Str("kind", kind).
		Str("key", key).
		Int64("fence", fence).
		Str("owner", owner).
		Str("request_id", middleware.GetRequestID(r.Context())).
		Msg("forced release")
	h.obs.ForcedRelease(user, kind)
	h.open.forced(permit, key, fence)
	w.WriteHeader(http.StatusNoContent)
}
