package ratelimit

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockgateway/lockgateway/internal/retryafter"
	"github.com/lockgateway/lockgateway/problem"
)

// Config is what Middleware needs besides the Limiter.
type Config struct {
	Key KeyFunc
	// Applies says which requests are limited; nil means all.
	Applies func(r *http.Request) bool
	// FailClosed refuses requests (503) when the store does not answer;
	// otherwise they are admitted.
	FailClosed bool
	// Shadow computes decisions, logs refusals and sends the headers, but
	// never refuses: for trying a limit on real traffic.
	Shadow bool
	Log    zerolog.Logger
	// Observe, when set, hears each decision: admitted, refused,
	// refused_cached, shadow_refused or error.
	Observe func(decision string)
	// Refused writes the body of a refusal (429), Unavailable of a store
	// failure with FailClosed (503), Unidentified of a request without an
	// identity (400). Status line and headers are theirs to write; the
	// RateLimit and Retry-After headers are already set. Nil ones write a
	// plain problem+json.
	Refused, Unavailable, Unidentified http.Handler
}

// Middleware limits requests with l. It sets the IETF draft headers
// (draft-ietf-httpapi-ratelimit-headers-10) on every limited response:
//
//	RateLimit-Policy: "1-per-<w>";q=1;w=<w>
//	RateLimit: "1-per-<w>";r=0;t=<seconds until the user may be admitted>
//
// and Retry-After on refusals. Building it with a nil Key is an error.
func Middleware(l *Limiter, c Config) (func(http.Handler) http.Handler, error) {
	if l == nil || c.Key == nil {
		return nil, errors.New("ratelimit: Middleware needs a Limiter and a Key func")
	}
	if c.Refused == nil {
		c.Refused = plainProblem(problem.RateLimited, "one request per window; retry after Retry-After seconds")
	}
	if c.Unavailable == nil {
		c.Unavailable = plainProblem(problem.Unavailable, "the rate limit could not be checked; retry shortly")
	}
	if c.Unidentified == nil {
		c.Unidentified = plainProblem(problem.Malformed, "the client could not be identified; configure how (see Config.Key)")
	}
	observe := c.Observe
	if observe == nil {
		observe = func(string) {}
	}
	w := windowSeconds(l.Window())
	name := fmt.Sprintf(`"1-per-%d"`, w)
	policy := fmt.Sprintf(`%s;q=1;w=%d`, name, w)

	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if c.Applies != nil && !c.Applies(r) {
				next.ServeHTTP(rw, r)
				return
			}
			user, ok := c.Key(r)
			if !ok {
				c.Unidentified.ServeHTTP(rw, r)
				return
			}
			d, err := l.Allow(r.Context(), user)
			if err == nil && d.LeaderErr != nil && (c.FailClosed || c.Shadow) {
				// A concurrent request's check failed, and this one
				// shared it: answer it as that one was answered (503, or
				// in shadow mode admitted). Failing open, it stays a
				// refusal: the failed check was admitted, and it is the
				// window's one admission (see Limiter.Allow).
				err = d.LeaderErr
			}
			switch {
			case err != nil:
				observe("error")
			case d.Allowed:
				observe("admitted")
			case c.Shadow:
				observe("shadow_refused")
			case d.Cached:
				observe("refused_cached")
			default:
				observe("refused")
			}
			if err != nil && r.Context().Err() != nil {
				// The request ended (its client went away) before its
				// check did: there is nobody to admit, and failing open
				// must not turn a burst of abandoned requests into
				// admissions.
				c.Log.Debug().Err(err).Msg("request ended during its rate limit check")
				rw.Header().Set("Retry-After", "1")
				c.Unavailable.ServeHTTP(rw, r)
				return
			}
			if err != nil {
				c.Log.Warn().Err(err).Bool("fail_closed", c.FailClosed).Msg("rate limit store did not answer")
				if c.FailClosed && !c.Shadow {
					rw.Header().Set("Retry-After", "1")
					c.Unavailable.ServeHTTP(rw, r)
					return
				}
				next.ServeHTTP(rw, r)
				return
			}
			h := rw.Header()
			h.Set("RateLimit-Policy", policy)
			h.Set("RateLimit", fmt.Sprintf("%s;r=0;t=%d", name, retryafter.Seconds(d.Reset)))
			if d.Allowed {
				next.ServeHTTP(rw, r)
				return
			}
			if c.Shadow {
				c.Log.Info().Bool("shadow", true).Dur("reset", d.Reset).Msg("rate limit would refuse")
				next.ServeHTTP(rw, r)
				return
			}
			h.Set("Retry-After", strconv.Itoa(retryafter.Seconds(d.Reset)))
			c.Refused.ServeHTTP(rw, r)
		})
	}, nil
}

// windowSeconds is the window as the headers' w parameter: whole seconds,
// rounded up.
func windowSeconds(d time.Duration) int { return retryafter.Seconds(d) }

// plainProblem is the default answer of a limiter used without the
// gateway's handlers: a bare problem of kind k.
func plainProblem(k problem.Kind, detail string) http.Handler {
	body := fmt.Sprintf(`{"type":%q,"title":%q,"status":%d,"detail":%q}`+"\n", k.Type(), k.Title, k.Status, detail)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(k.Status)
		_, _ = w.Write([]byte(body))
	})
}

// Routes parses a route list such as "PUT /locks/*, GET /ratelimit/check"
// into a matcher: each entry is a method and a path, a trailing "*"
// matching any rest of the path.
func Routes(spec string) (func(r *http.Request) bool, error) {
	type route struct{ method, path string }
	var routes []route
	for entry := range strings.SplitSeq(spec, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		method, path, ok := strings.Cut(entry, " ")
		path = strings.TrimSpace(path)
		if !ok || method != strings.ToUpper(method) || !strings.HasPrefix(path, "/") {
			return nil, fmt.Errorf("ratelimit: route %q is not \"METHOD /path\" (e.g. \"PUT /locks/*\")", entry)
		}
		routes = append(routes, route{method, path})
	}
	if len(routes) == 0 {
		return nil, errors.New("ratelimit: no routes")
	}
	return func(r *http.Request) bool {
		p := r.URL.Path
		for _, rt := range routes {
			if rt.method != r.Method {
				continue
			}
			if prefix, ok := strings.CutSuffix(rt.path, "*"); ok && strings.HasPrefix(p, prefix) || rt.path == p {
				return true
			}
		}
		return false
	}, nil
}
