package handlers

import (
	"net/http"
	"strconv"
)

// encodeLease writes a grant's or an extension's body, the one every
// acquire answers, byte for byte as encode would (encoding/json, HTML left
// unescaped, a newline at the end), without reflection when its strings
// need no escaping, which is nearly always: a token is [A-Za-z0-9_-], a
// timestamp plain ASCII. Any other string goes to encode.
// TestEncodeLeaseMatchesEncode and FuzzEncodeLease hold the two alike.
func encodeLease(w http.ResponseWriter, status int, l leaseBody) {
	if !plainJSON(l.Key) || !plainJSON(l.Token) || !plainJSON(l.Owner) || !plainJSON(l.ExpiresAt) {
		encode(w, status, "application/json", l)
		return
	}
	b := make([]byte, 0, 128+len(l.Key)+len(l.Token)+len(l.Owner))
	b = append(b, `{"key":"`...)
	b = append(b, l.Key...)
	b = append(b, `","token":"`...)
	b = append(b, l.Token...)
	b = append(b, `","fence":`...)
	b = strconv.AppendInt(b, l.Fence, 10)
	if l.Owner != "" {
		b = append(b, `,"owner":"`...)
		b = append(b, l.Owner...)
		b = append(b, '"')
	}
	b = append(b, `,"ttl_ms":`...)
	b = strconv.AppendInt(b, l.TTLms, 10)
	b = append(b, `,"expires_at":"`...)
	b = append(b, l.ExpiresAt...)
	b = append(b, "\"}\n"...)
	writeBody(w, status, "application/json", b)
}

// plainJSON: s is printable ASCII without '"' or '\', which encoding/json
// (HTML left unescaped) writes between quotes as it is.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
