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
		{"user":"cron","key_sha256":"`+digest("cron-key")+`"}]}`))
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
		{"no prefixes: any key", "/locks/jobs/nightly", "Bearer cron-key", 200, "cron", ""},
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
		"no name":       `{"users":[{"key_sha256":"` + digest("k") + `"}]}`,
		"duplicate":     `{"users":[{"user":"a","key_sha256":"` + digest("k") + `"},{"user":"a","key_sha256":"` + digest("j") + `"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := middleware.LoadAPIKeys(writeKeys(t, body))
			require.Error(t, err)
		})
	}
}
