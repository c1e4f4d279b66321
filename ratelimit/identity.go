package ratelimit

import (
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
//     range: anyone else could set it to anything;
//  3. the client IP, as chi's ClientIPFrom* middleware stored it (the TCP
//     peer, or X-Forwarded-For read through trusted ranges only). IPv6
//     clients count per /64, since one host usually holds a whole /64.
type Identity struct {
	Principal      func(r *http.Request) string
	UserHeader     string
	TrustedProxies []netip.Prefix
}

// Key implements KeyFunc.
func (id Identity) Key(r *http.Request) (string, bool) {
	if id.Principal != nil {
		if p := id.Principal(r); p != "" {
			return "user:" + p, true
		}
	}
	if id.UserHeader != "" && id.fromTrustedProxy(r) {
		if u := strings.TrimSpace(r.Header.Get(id.UserHeader)); u != "" && len(u) <= 256 {
			return "user:" + u, true
		}
	}
	if ip := chimw.GetClientIPAddr(r.Context()); ip.IsValid() {
		return IPKey(ip), true
	}
	if ip, ok := id.trustedClient(r); ok {
		return IPKey(ip), true
	}
	return "", false
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
