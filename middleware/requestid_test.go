package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/lockgateway/lockgateway/middleware"
)

func TestRequestID(t *testing.T) {
	var seen string
	h := middleware.RequestID(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = middleware.GetRequestID(r.Context())
	}))
	tests := []struct {
		name, in string
		kept     bool
	}{
		{"none", "", false},
		{"plain id kept", "trace-1.2_3", true},
		{"injection replaced", "x\"}\n{\"level\":\"error", false},
		{"too long replaced", string(make([]byte, 65)), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", "/", nil)
			if tc.in != "" {
				req.Header.Set("X-Request-Id", tc.in)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			assert.Equal(t, seen, rec.Header().Get("X-Request-Id"))
			if tc.kept {
				assert.Equal(t, tc.in, seen)
			} else {
				assert.NotEqual(t, tc.in, seen)
				assert.Len(t, seen, 16)
			}
		})
	}
}

// TestRequestIDHeaderCanonical: RequestID indexes the Header with the name
// directly, which finds a client's header only in net/http's spelling.
func TestRequestIDHeaderCanonical(t *testing.T) {
	assert.Equal(t, textproto.CanonicalMIMEHeaderKey(middleware.RequestIDHeader), middleware.RequestIDHeader)
	assert.Equal(t, textproto.CanonicalMIMEHeaderKey("Cache-Control"), "Cache-Control")
}

// TestNewRequestIDDistinct: fresh ids are plain, 16 characters long, and
// do not repeat.
func TestNewRequestIDDistinct(t *testing.T) {
	seen := make(map[string]bool)
	for range 100_000 {
		id := middleware.NewRequestID()
		if len(id) != 16 || seen[id] || strings.Trim(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			t.Fatalf("id %q: not 16 plain characters, or seen before", id)
		}
		seen[id] = true
	}
}
