package handlers

import (
	"errors"
	"net/http"

	"github.com/rs/zerolog"

	"github.com/lockgateway/lockgateway/middleware"
)

// whoamiJSON is the body of GET /whoami: the caller's user, the lock-key
// prefixes it may use and those it administers, as the API keys file
// writes them (["*"] alone: every key). Never the key, its digest, nor
// anything of another user.
type whoamiJSON struct {
	User          string   `json:"user,omitempty"`
	Prefixes      []string `json:"prefixes"`
	AdminPrefixes []string `json:"admin_prefixes"`
}

// Whoami serves GET /whoami: what the caller may do, so that a client (the
// dashboard) offers only what the gateway would allow, a forced release
// above all. apiKeys says whether API keys guard the route; the gateway
// checks every request all the same, and this answer decides nothing.
//
// Without API keys there is no user: anyone may lock every key and nobody
// administers any ({"prefixes":["*"],"admin_prefixes":[]}), as a forced
// release is then refused to everyone.
func Whoami(apiKeys bool, log zerolog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := middleware.GetAccess(r.Context())
		if !apiKeys {
			encode(w, http.StatusOK, "application/json", whoamiJSON{Prefixes: []string{middleware.AllKeysPrefix}, AdminPrefixes: []string{}})
			return
		}
		if !ok { // API keys let no request through without a user
			WriteError(w, r, log, errors.New("handlers: GET /whoami without an authenticated user"))
			return
		}
		body := whoamiJSON{User: a.User, Prefixes: a.Prefixes, AdminPrefixes: a.AdminPrefixes}
		if a.AllKeys {
			body.Prefixes = []string{middleware.AllKeysPrefix}
		}
		switch {
		case a.AdminAll:
			body.AdminPrefixes = []string{middleware.AllKeysPrefix}
		case body.AdminPrefixes == nil:
			body.AdminPrefixes = []string{}
		}
		encode(w, http.StatusOK, "application/json", body)
	})
}
