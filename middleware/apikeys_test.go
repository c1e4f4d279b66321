package middleware_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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
