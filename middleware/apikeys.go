package middleware

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
)

// APIKey is one user's key, as its SHA-256 digest, and what the user may
// lock: every key (AllKeys), or keys starting with one of Prefixes. A user
// with neither may lock nothing, and APIKeys refuses to be built with one:
// "everything" is never what an empty list or an empty prefix stands for.
type APIKey struct {
	User     string
	Digest   [sha256.Size]byte
	AllKeys  bool
	Prefixes []string
	// AdminAll and AdminPrefixes are the keys the user administers, a
	// part of what it may lock (none when both are unset): it may release
	// any lease under them without its token (a forced release).
	AdminAll      bool
	AdminPrefixes []string
}

// AllKeysPrefix, alone in a keys file's "prefixes", lets a user lock every
// key. It is the only way to: a prefix list that is missing or empty, or
// holds "", is refused, since each reads as "nothing" or was a template
// left blank, and would otherwise match everything.
const AllKeysPrefix = "*"

// LoadAPIKeys reads a keys file:
//
//	{"users": [
//	  {"user": "checkout", "key_sha256": "<64 hex digits>", "prefixes": ["sku/"]},
//	  {"user": "ops", "key_sha256": "<64 hex digits>", "prefixes": ["*"], "admin_prefixes": ["jobs/"]}
//	]}
//
// The file holds digests only (sha256sum of the key), so reading it does
// not reveal a key. Every user names its prefixes; ["*"] (AllKeysPrefix)
// is every key, and an entry that would allow every key by accident (no
// "prefixes", [], or a "" prefix) is an error. "admin_prefixes", optional,
// follows the same rules and must lie within "prefixes": the keys whose
// leases the user may release by force.
func LoadAPIKeys(path string) ([]APIKey, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var file struct {
		Users []struct {
			User      string    `json:"user"`
			KeySHA256 string    `json:"key_sha256"`
			Prefixes  *[]string `json:"prefixes"` // nil: missing
			Admin     *[]string `json:"admin_prefixes"`
		} `json:"users"`
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&file); err != nil {
		return nil, fmt.Errorf("%s: %s; the file is %s", path, keysFileError(raw, err), keysFileShape)
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
		k := APIKey{User: u.User}
		if u.Prefixes == nil {
			return nil, fmt.Errorf(`%s: user %q has no "prefixes": list the lock-key prefixes it may use (["jobs/"]), or ["*"] for every key`, path, u.User)
		}
		k.AllKeys, k.Prefixes, err = prefixes("prefixes", *u.Prefixes)
		if err != nil {
			return nil, fmt.Errorf("%s: user %q: %w", path, u.User, err)
		}
		if u.Admin != nil {
			if k.AdminAll, k.AdminPrefixes, err = prefixes("admin_prefixes", *u.Admin); err != nil {
				return nil, fmt.Errorf("%s: user %q: %w", path, u.User, err)
			}
			if err := adminWithin(k); err != nil {
				return nil, fmt.Errorf("%s: user %q: %w", path, u.User, err)
			}
		}
		copy(k.Digest[:], d)
		keys = append(keys, k)
	}
	return keys, nil
}

// keysFileShape is what a keys file looks like, for its error messages.
const keysFileShape = `{"users": [{"user": "ops", "key_sha256": "<sha256sum of the key>", "prefixes": ["jobs/"]}]}`

// keysFileError words a JSON error of a keys file for the person who wrote
// it: where it is and what was expected, never a Go type.
func keysFileError(raw []byte, err error) string {
	if e, ok := errors.AsType[*json.SyntaxError](err); ok {
		line, col := position(raw, e.Offset-1)
		return fmt.Sprintf("not valid JSON at line %d, column %d (%v)", line, col, e)
	}
	if e, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		want := map[string]string{
			"":                     "an object",
			"users":                "a list of users",
			"users.user":           "a string",
			"users.key_sha256":     "a string of 64 hex digits",
			"users.prefixes":       "a list of strings",
			"users.admin_prefixes": "a list of strings",
		}[e.Field]
		if want == "" {
			want = "something else"
		}
		where := "the file"
		if e.Field != "" {
			where = fmt.Sprintf("%q", e.Field)
		}
		line, col := position(raw, e.Offset-1)
		return fmt.Sprintf("%s is %s at line %d, column %d, but must be %s", where, article(e.Value), line, col, want)
	}
	if errors.Is(err, io.EOF) {
		return "it is empty"
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Sprintf("unknown field %s (a user has \"user\", \"key_sha256\", \"prefixes\" and \"admin_prefixes\", the file \"users\" only)", name)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// article is a JSON kind as a phrase: "an array", "a string".
func article(kind string) string {
	if kind == "array" || kind == "object" {
		return "an " + kind
	}
	return "a " + kind
}

// position is the line and column (from 1) of byte offset off in b; the
// json errors' offsets count the byte where they stopped, hence off-1.
func position(b []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(b)))
	line, col = 1, 1
	for _, c := range b[:off] {
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// prefixes reads a user's "prefixes" or "admin_prefixes" (field): ["*"]
// alone is every key; anything else is a list of non-empty prefixes.
func prefixes(field string, list []string) (all bool, _ []string, _ error) {
	switch {
	case len(list) == 0 && field == "prefixes":
		return false, nil, errors.New(`"prefixes" is empty; list the lock-key prefixes the user may use (["jobs/"]), or ["*"] for every key`)
	case len(list) == 0:
		return false, nil, fmt.Errorf(`%q is empty; list the lock-key prefixes the user administers (["jobs/"]), ["*"] for every key, or leave it out if none`, field)
	case len(list) == 1 && list[0] == AllKeysPrefix:
		return true, nil, nil
	}
	for _, p := range list {
		switch p {
		case "":
			return false, nil, fmt.Errorf(`%q: an empty prefix would match every key; write ["*"] if that is meant`, field)
		case AllKeysPrefix:
			return false, nil, fmt.Errorf(`%q: "*" (every key) cannot be listed with other prefixes`, field)
		}
	}
	return false, list, nil
}

// adminWithin refuses a user that would administer keys it may not lock:
// each admin prefix must start with one of its prefixes (any, with
// AllKeys), and ["*"] needs AllKeys.
func adminWithin(k APIKey) error {
	switch {
	case k.AllKeys:
		return nil
	case k.AdminAll:
		return errors.New(`"admin_prefixes" is ["*"] (every key), but "prefixes" is not: a user administers only keys it may lock`)
	}
	for _, a := range k.AdminPrefixes {
		if !allowed(k.Prefixes, a) {
			return fmt.Errorf(`admin prefix %q lies within none of its "prefixes" %q: a user administers only keys it may lock`, a, k.Prefixes)
		}
	}
	return nil
}

type principalKey struct{}

// GetPrincipal returns the user APIKeys authenticated, or "".
func GetPrincipal(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(*APIKey)
	if p == nil {
		return ""
	}
	return p.User
}

// Administers reports whether the user APIKeys authenticated administers
// key (its "admin_prefixes" cover it): it may release the key's leases by
// force. Never without API keys: then nobody has the role.
func Administers(ctx context.Context, key string) bool {
	p, _ := ctx.Value(principalKey{}).(*APIKey)
	return p != nil && (p.AdminAll || allowed(p.AdminPrefixes, key))
}

// Access is what the user APIKeys authenticated may do, without its key
// or digest: what GET /whoami tells the user itself.
type Access struct {
	User          string
	AllKeys       bool     // may lock every key; else Prefixes
	Prefixes      []string // the lock-key prefixes it may use
	AdminAll      bool     // administers every key; else AdminPrefixes
	AdminPrefixes []string // the prefixes it administers (none: nil)
}

// GetAccess returns what the user APIKeys authenticated may do; false
// when no user was (no API keys on this route).
func GetAccess(ctx context.Context) (Access, bool) {
	p, _ := ctx.Value(principalKey{}).(*APIKey)
	if p == nil {
		return Access{}, false
	}
	return Access{
		User:          p.User,
		AllKeys:       p.AllKeys,
		Prefixes:      slices.Clone(p.Prefixes),
		AdminAll:      p.AdminAll,
		AdminPrefixes: slices.Clone(p.AdminPrefixes),
	}, true
}

// AdminScope is what the user APIKeys authenticated administers: every
// key (all), the keys starting with one of prefixes, or nothing.
func AdminScope(ctx context.Context) (all bool, prefixes []string) {
	p, _ := ctx.Value(principalKey{}).(*APIKey)
	if p == nil {
		return false, nil
	}
	return p.AdminAll, p.AdminPrefixes
}

// APIKeysConfig is what APIKeys needs besides the keys.
type APIKeysConfig struct {
	// LockKey returns the lock key a request names; an error lets the
	// request through for the handler to refuse. Nil guards a route that
	// is about the whole service, not one lock (the profiler): only users
	// allowed every key (AllKeys) pass.
	LockKey func(r *http.Request) (string, error)
	// AnyUser guards a route about the caller itself (GET /whoami), not
	// about a lock: every known key passes, whatever its prefixes, and
	// LockKey is not used.
	AnyUser bool
	// CheckPrefix, when set, says why no lock key can start with a prefix
	// (a leading "/", a "*" meant as a wildcard): APIKeys then refuses to
	// be built rather than answer 403 to everything that user sends.
	CheckPrefix func(prefix string) error
	// Unauthorized and Forbidden write the 401 and 403 responses; the
	// WWW-Authenticate header is already set on a 401.
	Unauthorized, Forbidden http.Handler
}

// APIKeys requires "Authorization: Bearer <key>" with a known key, and a
// lock key inside the user's prefixes. Keys are compared by digest in
// constant time against every user, so timing tells nothing of which
// users exist. The key itself is never stored or logged.
func APIKeys(keys []APIKey, c APIKeysConfig) (func(http.Handler) http.Handler, error) {
	if len(keys) == 0 || c.Unauthorized == nil || c.Forbidden == nil {
		return nil, errors.New("middleware.APIKeys: needs keys, Unauthorized and Forbidden")
	}
	for _, k := range keys {
		if err := checkScope(k, c.CheckPrefix); err != nil {
			return nil, fmt.Errorf("user %q: %w", k.User, err)
		}
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
			if !user.AllKeys && !c.AnyUser {
				if c.LockKey == nil {
					c.Forbidden.ServeHTTP(w, r)
					return
				}
				if key, err := c.LockKey(r); err == nil && !allowed(user.Prefixes, key) {
					c.Forbidden.ServeHTTP(w, r)
					return
				}
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, user)))
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

// checkScope refuses a key whose scope is empty or would match every key
// without saying so (AllKeys), whoever built it.
func checkScope(k APIKey, check func(string) error) error {
	if k.AdminAll && len(k.AdminPrefixes) > 0 {
		return errors.New("AdminAll with admin prefixes: say one or the other")
	}
	if err := checkPrefixes(k.AdminPrefixes, check); err != nil {
		return fmt.Errorf("admin %w", err)
	}
	if err := adminWithin(k); err != nil {
		return err
	}
	if k.AllKeys {
		if len(k.Prefixes) > 0 {
			return errors.New("AllKeys with prefixes: say one or the other")
		}
		return nil
	}
	if len(k.Prefixes) == 0 {
		return errors.New("no prefixes and not AllKeys: the user could lock nothing")
	}
	return checkPrefixes(k.Prefixes, check)
}

// checkPrefixes refuses prefixes that would match every key by accident,
// or (check) none.
func checkPrefixes(prefixes []string, check func(string) error) error {
	for _, p := range prefixes {
		switch p {
		case "":
			return errors.New(`an empty prefix would match every key; set AllKeys (["*"] in a keys file) if the user may lock every key`)
		case AllKeysPrefix:
			return errors.New(`"*" is not a wildcard among other prefixes; set AllKeys (["*"] alone in a keys file) for every key`)
		}
		if check != nil {
			if err := check(p); err != nil {
				return fmt.Errorf("prefix %q can start no lock key: %w", p, err)
			}
		}
	}
	return nil
}

// allowed reports whether key starts with one of prefixes; checkScope made
// sure there is at least one and none is empty.
func allowed(prefixes []string, key string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}
