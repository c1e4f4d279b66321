package middleware

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// APIKey is one user's key, as its SHA-256 digest, and the lock-key
// prefixes the user may lock (none: any key).
type APIKey struct {
	User     string
	Digest   [sha256.Size]byte
	Prefixes []string
}

// LoadAPIKeys reads a keys file:
//
//	{"users": [
//	  {"user": "checkout", "key_sha256": "<64 hex digits>", "prefixes": ["sku/"]},
//	  {"user": "cron", "key_sha256": "<64 hex digits>"}
//	]}
//
// The file holds digests only (sha256sum of the key), so reading it does
// not reveal a key.
func LoadAPIKeys(path string) ([]APIKey, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var file struct {
		Users []struct {
			User      string   `json:"user"`
			KeySHA256 string   `json:"key_sha256"`
			Prefixes  []string `json:"prefixes"`
		} `json:"users"`
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&file); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(file.Users) == 0 {
		return nil, fmt.Errorf("%s: no users", path)
	}
	keys := make([]APIKey, 0, len(file.Users))
	seen := map[string]bool{}
	for i, u := range file.Users {
		d, err := hex.DecodeString(u.KeySHA256)
		switch {
		case u.User == "":
			return nil, fmt.Errorf("%s: user %d has no name", path, i+1)
		case seen[u.User]:
			return nil, fmt.Errorf("%s: user %q is listed twice", path, u.User)
		case err != nil || len(d) != sha256.Size:
			return nil, fmt.Errorf("%s: user %q: key_sha256 must be 64 hex digits (sha256sum of the key)", path, u.User)
		}
		seen[u.User] = true
		k := APIKey{User: u.User, Prefixes: u.Prefixes}
		copy(k.Digest[:], d)
		keys = append(keys, k)
	}
	return keys, nil
}

type principalKey struct{}

// GetPrincipal returns the user APIKeys authenticated, or "".
func GetPrincipal(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}

// APIKeysConfig is what APIKeys needs besides the keys.
type APIKeysConfig struct {
	// LockKey returns the lock key a request names; an error lets the
	// request through for the handler to refuse.
	LockKey func(r *http.Request) (string, error)
	// Unauthorized and Forbidden write the 401 and 403 responses; the
	// WWW-Authenticate header is already set on a 401.
	Unauthorized, Forbidden http.Handler
}

// APIKeys requires "Authorization: Bearer <key>" with a known key, and a
// lock key inside the user's prefixes. Keys are compared by digest in
// constant time against every user, so timing tells nothing of which
// users exist. The key itself is never stored or logged.
func APIKeys(keys []APIKey, c APIKeysConfig) (func(http.Handler) http.Handler, error) {
	if len(keys) == 0 || c.LockKey == nil || c.Unauthorized == nil || c.Forbidden == nil {
		return nil, errors.New("middleware.APIKeys: needs keys, LockKey, Unauthorized and Forbidden")
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			presented, ok := bearer(r)
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="lockgateway"`)
				c.Unauthorized.ServeHTTP(w, r)
				return
			}
			user := match(keys, sha256.Sum256([]byte(presented)))
			if user == nil {
				w.Header().Set("WWW-Authenticate", `Bearer realm="lockgateway", error="invalid_token"`)
				c.Unauthorized.ServeHTTP(w, r)
				return
			}
			if key, err := c.LockKey(r); err == nil && !allowed(user.Prefixes, key) {
				c.Forbidden.ServeHTTP(w, r)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, user.User)))
		})
	}, nil
}

func bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "Bearer") && token != ""
}

// match compares digest with every key, without stopping at the first hit.
func match(keys []APIKey, digest [sha256.Size]byte) *APIKey {
	var found *APIKey
	for i := range keys {
		if subtle.ConstantTimeCompare(keys[i].Digest[:], digest[:]) == 1 {
			found = &keys[i]
		}
	}
	return found
}

func allowed(prefixes []string, key string) bool {
	if len(prefixes) == 0 {
		return true
	}
	for _, p := range prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}
