package middleware_test

import (
	"context"
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

// TestRequestIDKeepsContext: the context RequestID hands on is the
// request's own with the id added: its other values, its deadline and its
// cancellation pass through.
func TestRequestIDKeepsContext(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	var ctx context.Context
	h := middleware.RequestID(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ctx = r.Context() }))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(parent))

	assert.Equal(t, "v", ctx.Value(key{}))
	assert.Len(t, middleware.GetRequestID(ctx), 16)
	assert.NoError(t, ctx.Err())
	child, stop := context.WithCancel(ctx)
	defer stop()
	cancel()
	<-child.Done() // a child of the request's context still ends with it
	assert.ErrorIs(t, ctx.Err(), context.Canceled)
	assert.Empty(t, middleware.GetRequestID(parent), "the id is the handed-on context's only")
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
