package server

import (
	"fmt"
	"net/http"
	"net/netip"

	"github.com/lockgateway/lockgateway/handlers"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/middleware"
	"github.com/lockgateway/lockgateway/problem"
	"github.com/lockgateway/lockgateway/ratelimit"
)

// addAccessControl builds the API-key check, the rate limiter and the
// per-user lock quota the configuration asks for.
func addAccessControl(d *deps, cfg Config, store lockstore.Store) error {
	if cfg.APIKeysFile != "" {
		keys, err := middleware.LoadAPIKeys(cfg.APIKeysFile)
		if err != nil {
			return fmt.Errorf("--api-keys-file: %w", err)
		}
		var admins []string // who may release by force, counted from 0
		for _, k := range keys {
			if k.AdminAll || len(k.AdminPrefixes) > 0 {
				admins = append(admins, k.User)
			}
		}
		d.metrics.Administrators(admins)
		d.auth, err = middleware.APIKeys(keys, middleware.APIKeysConfig{
			LockKey:      handlers.KeyFromPath,
			CheckPrefix:  handlers.CheckKeyPrefix,
			Unauthorized: handlers.Refuse(problem.Unauthorized, `send a valid API key as "Authorization: Bearer <key>"`),
			Forbidden:    handlers.Refuse(problem.Forbidden, "your API key may not lock this key: its prefixes do not cover it; use a key whose prefixes do"),
		})
		if err != nil {
			return fmt.Errorf("--api-keys-file: %s: %w", cfg.APIKeysFile, err)
		}
		// A listing names no lock but a prefix: a user may list a prefix
		// inside its own (every key listed starts with it), and gets a 403
		// for any other, the empty prefix included, rather than a page
		// quietly filtered to its keys.
		d.listAuth, err = middleware.APIKeys(keys, middleware.APIKeysConfig{
			LockKey: func(r *http.Request) (string, error) {
				q, err := handlers.ParseListQuery(r.URL.RawQuery)
				return q.Prefix, err
			},
			Unauthorized: handlers.Refuse(problem.Unauthorized, `send a valid API key as "Authorization: Bearer <key>"`),
			Forbidden:    handlers.Refuse(problem.Forbidden, "your API key may list only inside its prefixes: pass prefix= one of them, or a longer prefix that starts with one"),
		})
		if err != nil {
			return err
		}
		// What a key may do is for every known key to ask, whatever its
		// prefixes: the dashboard learns from it whether to offer a
		// forced release.
		d.whoAuth, err = middleware.APIKeys(keys, middleware.APIKeysConfig{
			AnyUser:      true,
			Unauthorized: handlers.Refuse(problem.Unauthorized, `send a valid API key as "Authorization: Bearer <key>"`),
			Forbidden:    handlers.Refuse(problem.Forbidden, "every known API key may ask what it may do"), // never sent
		})
		if err != nil {
			return err
		}
		if cfg.PProf {
			// No LockKey: the profiler shows the whole process, every
			// user's work, so only a user allowed every key may use it.
			d.pprofAuth, err = middleware.APIKeys(keys, middleware.APIKeysConfig{
				Unauthorized: handlers.Refuse(problem.Unauthorized, `send a valid API key as "Authorization: Bearer <key>"`),
				Forbidden:    handlers.Refuse(problem.Forbidden, `the profiler needs the API key of a user allowed every lock key ("prefixes": ["*"])`),
			})
			if err != nil {
				return err
			}
		}
	}
	// Who a request comes from, for the rate limit and the quota alike:
	// the API key's user, else a trusted proxy's user header, else the
	// client IP.
	identity := ratelimit.Identity{
		Principal:      func(r *http.Request) string { return middleware.GetPrincipal(r.Context()) },
		UserHeader:     cfg.UserHeader,
		TrustedProxies: cfg.TrustedProxies,
		ClientAddr:     d.clientAddr,
	}
	if cfg.MaxLocksPerUser > 0 {
		d.limits.MaxLocksPerUser = cfg.MaxLocksPerUser
		d.limits.User = identity.Key
	}
	if cfg.RateLimitWindow <= 0 {
		return nil
	}

	windows, ok := store.(lockstore.Windows)
	if !ok {
		windows = lockstore.LockWindows(store)
	}
	limiter, err := ratelimit.New(windows, cfg.RateLimitWindow, ratelimit.Options{Timeout: cfg.RateLimitTimeout})
	if err != nil {
		return err
	}
	applies, err := ratelimit.Routes(cfg.RateLimitRoutes)
	if err != nil {
		return err
	}
	rc := ratelimit.Config{
		Key:          identity.Key,
		Applies:      applies,
		FailClosed:   cfg.RateLimitFail == "closed",
		Shadow:       cfg.RateLimitShadow,
		Log:          d.log,
		Observe:      d.metrics.RateLimit,
		Refused:      handlers.Refuse(problem.RateLimited, "one request per window for each user; retry after Retry-After seconds"),
		Unavailable:  handlers.Refuse(problem.Unavailable, "the rate limit could not be checked; retry shortly"),
		Unidentified: handlers.Refuse(problem.Malformed, unidentified(cfg.UserHeader)),
	}
	if d.limit, err = ratelimit.Middleware(limiter, rc); err != nil {
		return err
	}
	rc.Applies = nil // the check endpoint is always limited
	rc.Refused = handlers.CheckRefused("one request per window for each user; retry after Retry-After seconds")
	d.check, err = ratelimit.Middleware(limiter, rc)
	return err
}

// unidentified is the detail of a 400 to a request whose client has no
// identity: what a trusted proxy sent that the gateway would not guess at.
func unidentified(userHeader string) string {
	if userHeader == "" {
		return "the client could not be identified: a trusted proxy sent a malformed X-Forwarded-For"
	}
	return "the client could not be identified: a trusted proxy sent a malformed X-Forwarded-For, or a user header (" +
		userHeader + ") that is not exactly one name (more than one value, a comma, or over 256 bytes)"
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}
