package handlers

import "net/http"

// The headers the lock endpoints read and write on every request, spelled
// as net/http stores them (textproto.CanonicalMIMEHeaderKey: "Etag", not
// "ETag"), so that they index a Header directly: Header.Get and Set
// canonicalize the name on every call, about 400 instructions each, a
// dozen times per acquire and release (BenchmarkCycle in server/).
// TestHeaderNamesCanonical checks the spelling.
const (
	hdrContentType    = "Content-Type"
	hdrContentLength  = "Content-Length"
	hdrLockToken      = "Lock-Token"
	hdrIfMatch        = "If-Match"
	hdrETag           = "Etag"
	hdrLocation       = "Location"
	hdrPrefer         = "Prefer"
	hdrPreferenceAppl = "Preference-Applied"
	hdrVary           = "Vary"
)

// header is h.Get(name) for a name in canonical form.
func header(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}
