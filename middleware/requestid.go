package middleware

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"math/rand/v2"
	"net/http"
)

// RequestIDHeader carries the request id, in and out.
const RequestIDHeader = "X-Request-Id"

type requestIDKey struct{}

// requestID is the request's context with its id, and the response
// header's value: one allocation where context.WithValue would add a
// second (and a string would be copied to the heap to fit in it). It also
// keeps whether the handler detached the request (detach.go), which the
// middlewares inside RequestID look for when their handler returns.
type requestID struct {
	context.Context // the request's own, which answers every other key
	id              string
	header          [1]string
	detached        *Detached
}

func (c *requestID) Value(key any) any {
	if key == (requestIDKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// RequestID gives every request an id, echoed in the X-Request-Id response
// header and readable with GetRequestID. A caller's own X-Request-Id is kept
// when it is short and plain (at most 64 of A–Z a–z 0–9 . _ -), so ids can be
// followed across services; anything else is replaced, so a client cannot
// inject text into our logs.
func RequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rid := &requestID{Context: r.Context()}
		// RequestIDHeader is canonical: indexing the Header directly
		// skips Get's and Set's canonicalization of the name.
		if v := r.Header[RequestIDHeader]; len(v) > 0 && validRequestID(v[0]) {
			rid.id = v[0]
		} else {
			rid.id = NewRequestID()
		}
		rid.header[0] = rid.id
		w.Header()[RequestIDHeader] = rid.header[:]
		next.ServeHTTP(w, r.WithContext(rid))
	})
}

// GetRequestID returns the request id RequestID stored in ctx, or "".
func GetRequestID(ctx context.Context) string {
	if rid, ok := ctx.Value(requestIDKey{}).(*requestID); ok {
		return rid.id
	}
	return ""
}

// NewRequestID returns a fresh request id: 96 random bits as 16 characters
// of URL-safe base64. The bits come from math/rand/v2's global generator,
// not crypto/rand: since Go 1.22 that is ChaCha8Rand, a cryptographically
// strong generator with a state per runtime thread seeded from the
// kernel's randomness (https://go.dev/blog/chacha8rand), so one id still
// cannot be predicted from others, and it costs a request far less than a
// read from crypto/rand. Ids repeat as rarely as any random 96-bit values
// (odds below 10^-9 among a billion) and, unlike a counter's, tell nothing
// of how many requests others sent. A request id labels a response and
// its log lines and grants nothing; secrets (lock tokens) still come from
// crypto/rand through randid.
func NewRequestID() string {
	var raw [12]byte
	binary.LittleEndian.PutUint64(raw[:8], rand.Uint64())
	binary.LittleEndian.PutUint32(raw[8:], rand.Uint32())
	var b [16]byte
	base64.RawURLEncoding.Encode(b[:], raw[:])
	return string(b[:])
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
