package middleware_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/middleware"
)

func digest(key string) string {
	d := sha256.Sum256([]byte(key))
	return hex.EncodeToString(d[:])
}

func writeKeys(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.json")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

func TestAPIKeys(t *testing.T) {
	keys, err := middleware.LoadAPIKeys(writeKeys(t, `{"users":[
		{"user":"checkout","key_sha256":"`+digest("checkout-key")+`","prefixes":["sku/","cart/"]},
		{"user":"cron","key_sha256":"`+digest("cron-key")+`","prefixes":["*"]}]}`))
	require.NoError(t, err)

	status := func(code int) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(code) })
	}
	auth, err := middleware.APIKeys(keys, middleware.APIKeysConfig{
		LockKey: func(r *http.Request) (string, error) {
			k, ok := strings.CutPrefix(r.URL.Path, "/locks/")
			if !ok {
				return "", errors.New("no key")
			}
			return k, nil
		},
		Unauthorized: status(http.StatusUnauthorized),
		Forbidden:    status(http.StatusForbidden),
	})
	require.NoError(t, err)
	var principal string
	h := auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		principal = middleware.GetPrincipal(r.Context())
	}))

	tests := []struct {
		name, path, authz string
		status            int
		user              string
		challenge         string
	}{
		{"no header", "/locks/sku/1", "", 401, "", `Bearer realm="lockgateway"`},
		{"wrong key", "/locks/sku/1", "Bearer nope", 401, "", `Bearer realm="lockgateway", error="invalid_token"`},
		{"basic auth", "/locks/sku/1", "Basic Y2hlY2tvdXQ6a2V5", 401, "", `Bearer realm="lockgateway"`},
		{"inside prefixes", "/locks/sku/1", "Bearer checkout-key", 200, "checkout", ""},
		{"scheme case-insensitive", "/locks/cart/9", "bearer checkout-key", 200, "checkout", ""},
		{"outside prefixes", "/locks/jobs/nightly", "Bearer checkout-key", 403, "", ""},
		{`"*": any key`, "/locks/jobs/nightly", "Bearer cron-key", 200, "cron", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			principal = ""
			req := httptest.NewRequest("PUT", tc.path, nil)
			if tc.authz != "" {
				req.Header.Set("Authorization", tc.authz)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			assert.Equal(t, tc.status, rec.Code)
			assert.Equal(t, tc.user, principal)
			assert.Equal(t, tc.challenge, rec.Header().Get("WWW-Authenticate"))
		})
	}
}

func TestLoadAPIKeysRejectsNonsense(t *testing.T) {
	for name, body := range map[string]string{
		"not JSON":      `users: []`,
		"no users":      `{"users":[]}`,
		"unknown field": `{"users":[{"user":"a","key":"plaintext"}]}`,
		"short digest":  `{"users":[{"user":"a","key_sha256":"abcd"}]}`,
		"no name":       `{"users":[{"key_sha256":"` + digest("k") + `","prefixes":["*"]}]}`,
		"duplicate":     `{"users":[{"user":"a","key_sha256":"` + digest("k") + `","prefixes":["*"]},{"user":"a","key_sha256":"` + digest("j") + `","prefixes":["*"]}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := middleware.LoadAPIKeys(writeKeys(t, body))
			require.Error(t, err)
		})
	}
}

// TestLoadAPIKeysRefusesAccidentalAllKeys: an entry that would let its user
// lock every key without saying "*" stops the gateway at start-up, with a
// message naming the user and the way out. (These used to load, and the
// user could lock teamB/... with a teamA key.)
func TestLoadAPIKeysRefusesAccidentalAllKeys(t *testing.T) {
	for name, prefixes := range map[string]string{
		"prefixes missing":    ``,
		"prefixes null":       `,"prefixes":null`,
		"prefixes empty":      `,"prefixes":[]`,
		"empty prefix":        `,"prefixes":[""]`,
		"empty among others":  `,"prefixes":["teamA/",""]`,
		"star among prefixes": `,"prefixes":["teamA/","*"]`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := middleware.LoadAPIKeys(writeKeys(t, `{"users":[
				{"user":"ops","key_sha256":"`+digest("ops-key")+`","prefixes":["*"]},
				{"user":"teamA","key_sha256":"`+digest("a-key")+`"`+prefixes+`}]}`))
			require.Error(t, err)
			assert.Contains(t, err.Error(), `user "teamA"`)
			assert.Contains(t, err.Error(), `"*"`, "the message says how to allow every key on purpose")
			assert.NotContains(t, err.Error(), "a-key")
		})
	}

	keys, err := middleware.LoadAPIKeys(writeKeys(t, `{"users":[
		{"user":"ops","key_sha256":"`+digest("ops-key")+`","prefixes":["*"]},
		{"user":"teamA","key_sha256":"`+digest("a-key")+`","prefixes":["teamA/"]}]}`))
	require.NoError(t, err)
	assert.True(t, keys[0].AllKeys)
	assert.Empty(t, keys[0].Prefixes)
	assert.False(t, keys[1].AllKeys)
	assert.Equal(t, []string{"teamA/"}, keys[1].Prefixes)
}

// TestAPIKeysChecksScopes: APIKeys itself refuses keys whose scope is empty
// or matches everything by accident, so a caller that builds []APIKey in
// code gets the same protection as a keys file; CheckPrefix refuses
// prefixes no lock key can start with.
func TestAPIKeysChecksScopes(t *testing.T) {
	deny := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusForbidden) })
	lockKey := func(r *http.Request) (string, error) { return strings.TrimPrefix(r.URL.Path, "/locks/"), nil }
	noSlash := func(p string) error {
		if strings.HasPrefix(p, "/") {
			return errors.New("keys never start with /")
		}
		return nil
	}
	for name, k := range map[string]middleware.APIKey{
		"no scope":               {User: "a"},
		"empty prefix":           {User: "a", Prefixes: []string{""}},
		"star as a prefix":       {User: "a", Prefixes: []string{"*"}},
		"all keys and prefixes":  {User: "a", AllKeys: true, Prefixes: []string{"x/"}},
		"prefix matching no key": {User: "a", Prefixes: []string{"/teamA/"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := middleware.APIKeys([]middleware.APIKey{k}, middleware.APIKeysConfig{
				LockKey: lockKey, CheckPrefix: noSlash, Unauthorized: deny, Forbidden: deny,
			})
			require.Error(t, err)
			assert.Contains(t, err.Error(), `user "a"`)
		})
	}
}

// TestAPIKeysWithoutLockKey: a route about the whole service (the
// profiler) lets through only users allowed every key.
func TestAPIKeysWithoutLockKey(t *testing.T) {
	status := func(code int) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(code) })
	}
	auth, err := middleware.APIKeys([]middleware.APIKey{
		{User: "ops", Digest: sha256.Sum256([]byte("ops-key")), AllKeys: true},
		{User: "teamA", Digest: sha256.Sum256([]byte("a-key")), Prefixes: []string{"teamA/"}},
	}, middleware.APIKeysConfig{Unauthorized: status(401), Forbidden: status(403)})
	require.NoError(t, err)
	h := auth(status(200))
	for key, want := range map[string]int{"ops-key": 200, "a-key": 403, "nope": 401} {
		req := httptest.NewRequest("GET", "/debug/pprof/heap", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		assert.Equal(t, want, rec.Code, key)
	}
}

// TestLoadAPIKeysShapeErrors: a keys file of the wrong shape is told in the
// file's terms (which field, where, what it must be), never a Go type.
func TestLoadAPIKeysShapeErrors(t *testing.T) {
	for body, want := range map[string]string{
		`[{"user":"ops"}]`:                        `the file is an array at line 1, column 1, but must be an object`,
		`{"users":{"user":"ops"}}`:                `"users" is an object at line 1, column 10, but must be a list of users`,
		`{"users":[{"user":7}]}`:                  `"users.user" is a number at line 1, column 19, but must be a string`,
		`{"users":[{"user":"a","prefixes":"x"}]}`: `"users.prefixes" is a string at line 1, column 36, but must be a list of strings`,
		"{\"users\":[\n  {\"user\": \"a\",}]}":    `not valid JSON at line 2, column 16`,
		`{"keys":[]}`:                             `unknown field "keys"`,
		``:                                        `it is empty`,
	} {
		_, err := middleware.LoadAPIKeys(writeKeys(t, body))
		require.Error(t, err, body)
		assert.Contains(t, err.Error(), want, body)
		assert.NotContains(t, err.Error(), "Go value", body)
		assert.NotContains(t, err.Error(), "struct", body)
		assert.Contains(t, err.Error(), `the file is {"users": [{"user": "ops"`, body)
	}
}

// TestLoadAPIKeysAdminPrefixes: "admin_prefixes" follows the rules of
// "prefixes" and must lie within them; a file that breaks either is
// refused, naming the user and the field.
func TestLoadAPIKeysAdminPrefixes(t *testing.T) {
	load := func(t *testing.T, user string) ([]middleware.APIKey, error) {
		return middleware.LoadAPIKeys(writeKeys(t, `{"users":[`+user+`]}`))
	}
	entry := func(prefixes, admin string) string {
		return `{"user":"ops","key_sha256":"` + digest("ops-key") + `","prefixes":` + prefixes + `,"admin_prefixes":` + admin + `}`
	}
	for name, tc := range map[string]struct{ prefixes, admin, want string }{
		"empty":                 {`["jobs/"]`, `[]`, `"admin_prefixes" is empty`},
		"empty prefix":          {`["jobs/"]`, `[""]`, `"admin_prefixes": an empty prefix`},
		"star among prefixes":   {`["jobs/"]`, `["jobs/","*"]`, `"admin_prefixes": "*" (every key) cannot be listed`},
		"outside the prefixes":  {`["jobs/"]`, `["cart/"]`, `admin prefix "cart/" lies within none`},
		"wider than a prefix":   {`["jobs/nightly/"]`, `["jobs/"]`, `admin prefix "jobs/" lies within none`},
		"star without all keys": {`["jobs/"]`, `["*"]`, `"admin_prefixes" is ["*"] (every key), but "prefixes" is not`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := load(t, entry(tc.prefixes, tc.admin))
			require.Error(t, err)
			assert.Contains(t, err.Error(), `user "ops"`)
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	for name, tc := range map[string]struct {
		prefixes, admin string
		all             bool
		want            []string
	}{
		"inside":                {`["jobs/","cart/"]`, `["jobs/nightly/"]`, false, []string{"jobs/nightly/"}},
		"equal":                 {`["jobs/"]`, `["jobs/"]`, false, []string{"jobs/"}},
		"every key, all of it":  {`["*"]`, `["*"]`, true, nil},
		"every key, some of it": {`["*"]`, `["jobs/"]`, false, []string{"jobs/"}},
		"null: none, as absent": {`["jobs/"]`, `null`, false, nil},
	} {
		t.Run(name, func(t *testing.T) {
			keys, err := load(t, entry(tc.prefixes, tc.admin))
			require.NoError(t, err)
			assert.Equal(t, tc.all, keys[0].AdminAll)
			assert.Equal(t, tc.want, keys[0].AdminPrefixes)
		})
	}

	keys, err := load(t, `{"user":"a","key_sha256":"`+digest("a")+`","prefixes":["jobs/"]}`)
	require.NoError(t, err)
	assert.False(t, keys[0].AdminAll, "no admin_prefixes: administers nothing")
	assert.Empty(t, keys[0].AdminPrefixes)
}

// TestAPIKeysAdministers: the admin role reaches the handler through the
// request's context, for the keys it covers only; APIKeys refuses to be
// built with an admin scope outside the user's own.
func TestAPIKeysAdministers(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	deny := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusForbidden) })
	lockKey := func(r *http.Request) (string, error) { return strings.TrimPrefix(r.URL.Path, "/locks/"), nil }
	auth, err := middleware.APIKeys([]middleware.APIKey{
		{User: "root", Digest: sha256.Sum256([]byte("root-key")), AllKeys: true, AdminAll: true},
		{User: "ops", Digest: sha256.Sum256([]byte("ops-key")), Prefixes: []string{"jobs/", "cart/"}, AdminPrefixes: []string{"jobs/"}},
		{User: "dev", Digest: sha256.Sum256([]byte("dev-key")), Prefixes: []string{"jobs/"}},
	}, middleware.APIKeysConfig{LockKey: lockKey, Unauthorized: deny, Forbidden: deny})
	require.NoError(t, err)
	var administers bool
	var all bool
	var scope []string
	h := auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.URL.Path, "/locks/")
		administers = middleware.Administers(r.Context(), key)
		all, scope = middleware.AdminScope(r.Context())
		ok.ServeHTTP(w, r)
	}))
	for _, tc := range []struct {
		key, path   string
		administers bool
		all         bool
		scope       []string
	}{
		{"root-key", "/locks/anything", true, true, nil},
		{"ops-key", "/locks/jobs/nightly", true, false, []string{"jobs/"}},
		{"ops-key", "/locks/cart/7", false, false, []string{"jobs/"}},
		{"dev-key", "/locks/jobs/nightly", false, false, nil},
	} {
		req := httptest.NewRequest("DELETE", tc.path, nil)
		req.Header.Set("Authorization", "Bearer "+tc.key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code, tc.key+" "+tc.path)
		assert.Equal(t, tc.administers, administers, tc.key+" "+tc.path)
		assert.Equal(t, tc.all, all, tc.key)
		assert.Equal(t, tc.scope, scope, tc.key)
	}
	assert.False(t, middleware.Administers(httptest.NewRequest("DELETE", "/locks/x", nil).Context(), "x"), "without API keys nobody administers")

	for name, k := range map[string]middleware.APIKey{
		"admin outside":           {User: "a", Prefixes: []string{"jobs/"}, AdminPrefixes: []string{"cart/"}},
		"admin all, not all keys": {User: "a", Prefixes: []string{"jobs/"}, AdminAll: true},
		"admin all and prefixes":  {User: "a", AllKeys: true, AdminAll: true, AdminPrefixes: []string{"x/"}},
		"admin empty prefix":      {User: "a", AllKeys: true, AdminPrefixes: []string{""}},
		"admin matching no key":   {User: "a", AllKeys: true, AdminPrefixes: []string{"/x/"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := middleware.APIKeys([]middleware.APIKey{k}, middleware.APIKeysConfig{
				LockKey: lockKey, Unauthorized: deny, Forbidden: deny,
				CheckPrefix: func(p string) error {
					if strings.HasPrefix(p, "/") {
						return errors.New("keys never start with /")
					}
					return nil
				},
			})
			require.Error(t, err)
			assert.Contains(t, err.Error(), `user "a"`)
		})
	}
}

// TestAPIKeysAnyUser: a route about the caller itself (GET /whoami) lets
// every known key through, whatever its prefixes, and hands the handler
// what the key may do (GetAccess), which the handler cannot change for the
// next request; an unknown key or none is still 401.
func TestAPIKeysAnyUser(t *testing.T) {
	status := func(code int) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(code) })
	}
	auth, err := middleware.APIKeys([]middleware.APIKey{
		{User: "root", Digest: sha256.Sum256([]byte("root-key")), AllKeys: true, AdminAll: true},
		{User: "ops", Digest: sha256.Sum256([]byte("ops-key")), Prefixes: []string{"jobs/", "cart/"}, AdminPrefixes: []string{"jobs/"}},
		{User: "dev", Digest: sha256.Sum256([]byte("dev-key")), Prefixes: []string{"jobs/"}},
	}, middleware.APIKeysConfig{AnyUser: true, Unauthorized: status(401), Forbidden: status(403)})
	require.NoError(t, err)
	var got middleware.Access
	var found bool
	h := auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := middleware.GetAccess(r.Context())
		got, found = a, ok
		got.Prefixes = slices.Clone(a.Prefixes)
		if len(a.Prefixes) > 0 {
			a.Prefixes[0] = "changed/" // a copy: the key's own stay as loaded
		}
		w.WriteHeader(200)
	}))
	for _, tc := range []struct {
		key    string
		status int
		want   middleware.Access
	}{
		{"root-key", 200, middleware.Access{User: "root", AllKeys: true, AdminAll: true}},
		{"ops-key", 200, middleware.Access{User: "ops", Prefixes: []string{"jobs/", "cart/"}, AdminPrefixes: []string{"jobs/"}}},
		{"ops-key", 200, middleware.Access{User: "ops", Prefixes: []string{"jobs/", "cart/"}, AdminPrefixes: []string{"jobs/"}}},
		{"dev-key", 200, middleware.Access{User: "dev", Prefixes: []string{"jobs/"}}},
		{"nope", 401, middleware.Access{}},
		{"", 401, middleware.Access{}},
	} {
		got, found = middleware.Access{}, false
		req := httptest.NewRequest("GET", "/whoami", nil)
		if tc.key != "" {
			req.Header.Set("Authorization", "Bearer "+tc.key)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		assert.Equal(t, tc.status, rec.Code, tc.key)
		assert.Equal(t, tc.status == 200, found, tc.key)
		assert.Equal(t, tc.want, got, tc.key)
	}
	_, found = middleware.GetAccess(httptest.NewRequest("GET", "/whoami", nil).Context())
	assert.False(t, found, "no user without API keys")
}
