package ratelimit

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	chimw "github.com/go-chi/chi/v5/middleware"
)

// KeyFunc names the user a request counts against; false means the request
// has no usable identity (and must not share a bucket with others).
type KeyFunc func(r *http.Request) (string, bool)

// Identity is the gateway's rule for who a request comes from, in order:
//
//  1. the authenticated principal (an API key's user), when Principal
//     returns one;
//  2. the UserHeader, only when the connection comes from a TrustedProxies
//     range: anyone else could set it to anything. It must hold one name:
//     several values (field lines, or a comma list) or a name over 256
//     bytes leave the request without an identity (see user);
//  3. the client IP: ClientAddr's (PeerAddr, or AddrFrom one of chi's
//     ClientIPFrom* middlewares), or without ClientAddr what such a
//     middleware stored (the TCP peer, or X-Forwarded-For read through
//     trusted ranges only). IPv6 clients count per /64, since one host
//     usually holds a whole /64.
type Identity struct {
	Principal      func(r *http.Request) string
	UserHeader     string
	TrustedProxies []netip.Prefix
	ClientAddr     func(r *http.Request) netip.Addr
}

// Key implements KeyFunc.
func (id Identity) Key(r *http.Request) (string, bool) {
	if id.Principal != nil {
		if p := id.Principal(r); p != "" {
			return "user:" + p, true
		}
	}
	if id.UserHeader != "" && id.fromTrustedProxy(r) {
		u, ok := id.user(r)
		if !ok {
			return "", false
		}
		if u != "" {
			return "user:" + u, true
		}
	}
	if ip := id.clientAddr(r); ip.IsValid() {
		return IPKey(ip), true
	}
	if ip, ok := id.trustedClient(r); ok {
		return IPKey(ip), true
	}
	return "", false
}

func (id Identity) clientAddr(r *http.Request) netip.Addr {
	if id.ClientAddr != nil {
		return id.ClientAddr(r)
	}
	return chimw.GetClientIPAddr(r.Context())
}

// PeerAddr is the TCP peer's address, as chi's ClientIPFromRemoteAddr
// stores it (a v4-mapped address folded to v4, a zone kept), found only
// for the requests that ask: a middleware storing it in every request's
// context cost each request a copy of the request and a context.
func PeerAddr(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr // already a bare address (in tests)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return ip.Unmap()
}

// AddrFrom runs one of chi's ClientIPFrom* middlewares (e.g.
// ClientIPFromXFF) for a request when asked, and returns the address it
// stores, or the zero Addr when it stores none: its rules, paid for only by
// the requests that need the client's address.
func AddrFrom(mw func(http.Handler) http.Handler) func(r *http.Request) netip.Addr {
	return func(r *http.Request) netip.Addr {
		var ip netip.Addr
		mw(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			ip = chimw.GetClientIPAddr(r.Context())
		})).ServeHTTP(nil, r)
		return ip
	}
}

// user reads the user header from a trusted proxy: "" when there is none,
// false when it is not exactly one name. A proxy that appends to the header
// instead of overwriting it passes the client's own value on too, first
// (X-User: victim, then X-User: attacker), and an intermediary may join
// the two into one line with a comma (RFC 9110, section 5.3). Believing
// the first would let a client spend anyone's window, believing the last
// is right only if every proxy appends at the end, and believing the
// joined text would give a client a fresh window for each value it makes
// up. So more than one value is refused, as an unparseable
// X-Forwarded-For is: a user name cannot hold a comma.
func (id Identity) user(r *http.Request) (string, bool) {
	values := r.Header.Values(id.UserHeader)
	if len(values) == 0 {
		return "", true
	}
	if len(values) > 1 {
		return "", false
	}
	u := strings.TrimSpace(values[0])
	if strings.Contains(u, ",") || len(u) > 256 {
		return "", false
	}
	return u, true
}

// trustedClient covers what chi's ClientIPFromXFF leaves unset when every
// hop is trusted: a client inside the trusted ranges (a curl on the proxy
// host, an internal service). With no X-Forwarded-For the peer itself is
// the client; with an all-trusted chain, its leftmost entry is (nginx's
// real_ip_recursive). A chain with an unparseable entry stays unidentified.
func (id Identity) trustedClient(r *http.Request) (netip.Addr, bool) {
	if !id.fromTrustedProxy(r) {
		return netip.Addr{}, false
	}
	var chain []netip.Addr
	for _, h := range r.Header.Values("X-Forwarded-For") {
		for entry := range strings.SplitSeq(h, ",") {
			if entry = strings.TrimSpace(entry); entry == "" {
				continue // as chi does: "a, b," is two entries
			}
			ip, err := netip.ParseAddr(entry)
			if err != nil {
				return netip.Addr{}, false
			}
			ip = ip.Unmap().WithZone("")
			if !id.trusted(ip) {
				return netip.Addr{}, false
			}
			chain = append(chain, ip)
		}
	}
	if len(chain) == 0 {
		ap, _ := netip.ParseAddrPort(r.RemoteAddr) // parsed by fromTrustedProxy
		return ap.Addr().Unmap(), true
	}
	return chain[0], true
}

func (id Identity) fromTrustedProxy(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	return id.trusted(ap.Addr().Unmap())
}

func (id Identity) trusted(ip netip.Addr) bool {
	for _, p := range id.TrustedProxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// IPKey is the bucket of a client address: the address for IPv4, its /64
// for IPv6.
func IPKey(ip netip.Addr) string {
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return "ip:" + p.String()
	}
	return "ip:" + ip.String()
}
