package middleware

import (
	"context"
	"net/http"

	"github.com/lockgateway/lockgateway/internal/randid"
)

// RequestIDHeader carries the request id, in and out.
const RequestIDHeader = "X-Request-Id"

type requestIDKey struct{}

// requestID is what RequestID keeps of a request: its id, and the response
// header's value, one allocation together; the context holds a pointer to
// it (a string would be copied to the heap to fit in the context).
type requestID struct {
	id     string
	header [1]string
}

// RequestID gives every request an id, echoed in the X-Request-Id response
// header and readable with GetRequestID. A caller's own X-Request-Id is kept
// when it is short and plain (at most 64 of A–Z a–z 0–9 . _ -), so ids can be
// followed across services; anything else is replaced, so a client cannot
// inject text into our logs.
func RequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rid := &requestID{}
		// RequestIDHeader is canonical: indexing the Header directly
		// skips Get's and Set's canonicalization of the name.
		if v := r.Header[RequestIDHeader]; len(v) > 0 && validRequestID(v[0]) {
			rid.id = v[0]
		} else {
			rid.id = NewRequestID()
		}
		rid.header[0] = rid.id
		w.Header()[RequestIDHeader] = rid.header[:]
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey{}, rid)))
	})
}

// GetRequestID returns the request id RequestID stored in ctx, or "".
func GetRequestID(ctx context.Context) string {
	if rid, ok := ctx.Value(requestIDKey{}).(*requestID); ok {
		return rid.id
	}
	return ""
}

// NewRequestID returns a fresh random request id.
func NewRequestID() string { return randid.New(12) }

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
