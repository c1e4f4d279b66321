package ratelimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	chimw "github.com/go-chi/chi/v5/middleware"
	"github.com/stretchr/testify/assert"

	"github.com/lockgateway/lockgateway/ratelimit"
)

// TestClientAddrAsChi: the lookups find, for each request, the address
// chi's middleware would have stored in its context (none: the zero Addr).
func TestClientAddrAsChi(t *testing.T) {
	xff := chimw.ClientIPFromXFF("10.0.0.0/8", "::1/128")
	for _, tc := range []struct {
		remote, xff string
	}{
		{"203.0.113.7:5000", ""},
		{"[2001:db8::1]:443", ""},
		{"[::ffff:203.0.113.7]:5000", ""},
		{"[fe80::1%eth0]:5000", ""},
		{"203.0.113.7", ""}, // a bare address, as tests set it
		{"not-an-address", ""},
		{"", ""},
		{"10.1.2.3:5000", "198.51.100.1"},
		{"10.1.2.3:5000", "198.51.100.1, 10.9.9.9"},
		{"10.1.2.3:5000", "10.9.9.9"}, // all trusted: chi stores none
		{"10.1.2.3:5000", "garbage"},
		{"[::1]:5000", "[::ffff:198.51.100.2]"},
		{"203.0.113.7:5000", "198.51.100.1"}, // untrusted peer: XFF ignored
	} {
		req := httptest.NewRequest("PUT", "/locks/k", nil)
		req.RemoteAddr = tc.remote
		if tc.xff != "" {
			req.Header.Set("X-Forwarded-For", tc.xff)
		}
		for name, c := range map[string]struct {
			mw     func(http.Handler) http.Handler
			lookup func(*http.Request) netip.Addr
		}{
			"PeerAddr": {chimw.ClientIPFromRemoteAddr, ratelimit.PeerAddr},
			"AddrFrom": {xff, ratelimit.AddrFrom(xff)},
		} {
			var want netip.Addr
			c.mw(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				want = chimw.GetClientIPAddr(r.Context())
			})).ServeHTTP(httptest.NewRecorder(), req)
			assert.Equal(t, want, c.lookup(req), "%s: RemoteAddr %q, X-Forwarded-For %q", name, tc.remote, tc.xff)
		}
	}
}

// TestIdentityClientAddr: with ClientAddr, the identity asks it and needs
// no middleware in front.
func TestIdentityClientAddr(t *testing.T) {
	id := ratelimit.Identity{ClientAddr: ratelimit.PeerAddr}
	req := httptest.NewRequest("PUT", "/locks/k", nil)
	req.RemoteAddr = "203.0.113.7:5000"
	key, ok := id.Key(req)
	assert.True(t, ok)
	assert.Equal(t, "ip:203.0.113.7", key)
}
