package ratelimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	chimw "github.com/go-chi/chi/v5/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/memory"
	"github.com/lockgateway/lockgateway/ratelimit"
)

// counting wraps a real store and counts its round trips.
type counting struct {
	lockstore.Windows
	calls atomic.Int64
}

func (c *counting) TakeWindow(ctx context.Context, key, id string, window time.Duration) (time.Duration, error) {
	c.calls.Add(1)
	return c.Windows.TakeWindow(ctx, key, id, window)
}

func TestOneRequestPerWindow(t *testing.T) {
	store := &counting{Windows: memory.New()}
	l, err := ratelimit.New(store, 200*time.Millisecond, ratelimit.Options{})
	require.NoError(t, err)
	ctx := context.Background()

	d, err := l.Allow(ctx, "alice")
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, 200*time.Millisecond, d.Reset)

	d, err = l.Allow(ctx, "alice")
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.True(t, d.Cached, "known to be refused: no store round trip")
	assert.Greater(t, d.Reset, 100*time.Millisecond)
	assert.LessOrEqual(t, d.Reset, 200*time.Millisecond)

	d, err = l.Allow(ctx, "bob")
	require.NoError(t, err)
	assert.True(t, d.Allowed, "users are independent")

	time.Sleep(220 * time.Millisecond)
	d, err = l.Allow(ctx, "alice")
	require.NoError(t, err)
	assert.True(t, d.Allowed, "a new window")
	assert.Equal(t, int64(3), store.calls.Load(), "one round trip per admission, none for cached refusals")
}

// Another replica's admission is only learned from the store; after that
// refusal, the replica refuses from its cache.
func TestRefusalLearnedFromStoreIsCached(t *testing.T) {
	shared := memory.New()
	a, err := ratelimit.New(shared, time.Second, ratelimit.Options{})
	require.NoError(t, err)
	storeB := &counting{Windows: shared}
	b, err := ratelimit.New(storeB, time.Second, ratelimit.Options{})
	require.NoError(t, err)
	ctx := context.Background()

	d, _ := a.Allow(ctx, "alice")
	require.True(t, d.Allowed)
	for i := range 100 {
		d, err := b.Allow(ctx, "alice")
		require.NoError(t, err)
		require.False(t, d.Allowed)
		assert.Equal(t, i > 0, d.Cached)
	}
	assert.Equal(t, int64(1), storeB.calls.Load())
}

func TestCacheIsBounded(t *testing.T) {
	store := &counting{Windows: memory.New()}
	l, err := ratelimit.New(store, time.Minute, ratelimit.Options{CacheSize: 2})
	require.NoError(t, err)
	ctx := context.Background()
	for _, u := range []string{"a", "b", "c"} {
		d, err := l.Allow(ctx, u)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	d, err := l.Allow(ctx, "c") // not cached: the cache was full
	require.NoError(t, err)
	assert.False(t, d.Allowed, "still refused, by the store")
	assert.False(t, d.Cached)
}

func TestNewRejectsNonsense(t *testing.T) {
	_, err := ratelimit.New(memory.New(), time.Millisecond, ratelimit.Options{})
	require.Error(t, err)
	_, err = ratelimit.New(nil, time.Second, ratelimit.Options{})
	require.Error(t, err)
	l, err := ratelimit.New(memory.New(), time.Second, ratelimit.Options{})
	require.NoError(t, err)
	_, err = l.Allow(context.Background(), "")
	require.Error(t, err, "an empty identity is never a bucket")
	_, err = ratelimit.Middleware(l, ratelimit.Config{})
	require.Error(t, err, "no key function")
}

func TestIdentity(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	id := ratelimit.Identity{
		Principal:      func(r *http.Request) string { return r.Header.Get("Test-Principal") },
		UserHeader:     "X-User",
		TrustedProxies: trusted,
	}
	tests := []struct {
		name    string
		remote  string
		headers map[string]string
		want    string
	}{
		{"peer address", "203.0.113.7:5000", nil, "ip:203.0.113.7"},
		{"forged XFF from an untrusted peer", "203.0.113.7:5000", map[string]string{"X-Forwarded-For": "198.51.100.1"}, "ip:203.0.113.7"},
		{"forged user header from an untrusted peer", "203.0.113.7:5000", map[string]string{"X-User": "bob"}, "ip:203.0.113.7"},
		{"XFF through a trusted proxy", "10.1.2.3:5000", map[string]string{"X-Forwarded-For": "198.51.100.1"}, "ip:198.51.100.1"},
		{"user header through a trusted proxy", "10.1.2.3:5000", map[string]string{"X-User": "bob"}, "user:bob"},
		{"principal first", "10.1.2.3:5000", map[string]string{"X-User": "bob", "Test-Principal": "alice"}, "user:alice"},
		{"IPv6 per /64", "[2001:db8:1:2:aaaa::1]:5000", nil, "ip:2001:db8:1:2::/64"},
		{"IPv6 same /64", "[2001:db8:1:2:bbbb::9]:5000", nil, "ip:2001:db8:1:2::/64"},
		{"v4-mapped folds to v4", "[::ffff:203.0.113.7]:5000", nil, "ip:203.0.113.7"},
		{"client inside the trusted range", "10.1.2.3:5000", nil, "ip:10.1.2.3"},
		{"all-trusted chain: leftmost", "10.1.2.3:5000", map[string]string{"X-Forwarded-For": "10.9.9.9, 10.5.5.5"}, "ip:10.9.9.9"},
		{"empty entries skipped", "10.1.2.3:5000", map[string]string{"X-Forwarded-For": "10.9.9.9,"}, "ip:10.9.9.9"},
	}
	mw := chimw.ClientIPFromXFF("10.0.0.0/8")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest("PUT", "/locks/k", nil)
			req.RemoteAddr = tc.remote
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			var got string
			var ok bool
			mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got, ok = id.Key(r) })).
				ServeHTTP(httptest.NewRecorder(), req)
			require.True(t, ok)
			assert.Equal(t, tc.want, got)
		})
	}

	t.Run("garbage XFF from a trusted proxy has no identity", func(t *testing.T) {
		req := httptest.NewRequest("PUT", "/locks/k", nil)
		req.RemoteAddr = "10.1.2.3:5000"
		req.Header.Set("X-Forwarded-For", "not-an-ip")
		var ok bool
		mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, ok = id.Key(r) })).
			ServeHTTP(httptest.NewRecorder(), req)
		assert.False(t, ok, "never one shared bucket for everyone behind the proxy")
	})

	// A proxy that appends rather than overwrites passes the client's own
	// value on first: believing either one, or the joined text, would let
	// a client spend another user's window or make up fresh ones.
	for name, values := range map[string][]string{
		"doubled user header":       {"victim", "attacker"},
		"doubled, first empty":      {"", "attacker"},
		"user header as a list":     {"victim, attacker"},
		"user header over 256 B":    {strings.Repeat("u", 257)},
		"doubled, same value twice": {"bob", "bob"},
	} {
		t.Run(name+" has no identity", func(t *testing.T) {
			req := httptest.NewRequest("PUT", "/locks/k", nil)
			req.RemoteAddr = "10.1.2.3:5000"
			for _, v := range values {
				req.Header.Add("X-User", v)
			}
			var got string
			ok := true
			mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got, ok = id.Key(r) })).
				ServeHTTP(httptest.NewRecorder(), req)
			assert.False(t, ok, "counted as %q", got)
		})
	}
	t.Run("doubled user header from an untrusted peer is ignored", func(t *testing.T) {
		req := httptest.NewRequest("PUT", "/locks/k", nil)
		req.RemoteAddr = "203.0.113.7:5000"
		req.Header.Add("X-User", "victim")
		req.Header.Add("X-User", "attacker")
		var got string
		var ok bool
		mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got, ok = id.Key(r) })).
			ServeHTTP(httptest.NewRecorder(), req)
		require.True(t, ok)
		assert.Equal(t, "ip:203.0.113.7", got)
	})
}

func TestRoutes(t *testing.T) {
	applies, err := ratelimit.Routes("PUT /locks/*, GET /locks/jobs/nightly")
	require.NoError(t, err)
	for _, tc := range []struct {
		method, path string
		want         bool
	}{
		{"PUT", "/locks/a/b", true},
		{"PATCH", "/locks/a", false},
		{"DELETE", "/locks/a", false},
		{"GET", "/locks/jobs/nightly", true},
		{"GET", "/locks/jobs/other", false},
	} {
		assert.Equal(t, tc.want, applies(httptest.NewRequest(tc.method, tc.path, nil)), "%s %s", tc.method, tc.path)
	}
	for _, bad := range []string{"", "PUT", "put /locks/*", "PUT locks"} {
		_, err := ratelimit.Routes(bad)
		assert.Error(t, err, "%q", bad)
	}
}

func TestMiddlewareHeaders(t *testing.T) {
	l, err := ratelimit.New(memory.New(), 1500*time.Millisecond, ratelimit.Options{})
	require.NoError(t, err)
	mw, err := ratelimit.Middleware(l, ratelimit.Config{Key: func(*http.Request) (string, bool) { return "u", true }})
	require.NoError(t, err)
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("PUT", "/", nil))
	assert.Equal(t, http.StatusNoContent, rec.Code)
	assert.Equal(t, `"1-per-2";q=1;w=2`, rec.Header().Get("RateLimit-Policy"), "w rounds up to whole seconds")
	assert.Equal(t, `"1-per-2";r=0;t=2`, rec.Header().Get("RateLimit"))
	assert.Empty(t, rec.Header().Get("Retry-After"))

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("PUT", "/", nil))
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
	assert.Equal(t, "2", rec.Header().Get("Retry-After"))
	assert.Equal(t, `"1-per-2";r=0;t=2`, rec.Header().Get("RateLimit"))
}
