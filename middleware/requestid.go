package middleware

import (
	"context"
	"net/http"

	"github.com/lockgateway/lockgateway/internal/randid"
)

// RequestIDHeader carries the request id, in and out.
const RequestIDHeader = "X-Request-Id"

type requestIDKey struct{}

// RequestID gives every request an id, echoed in the X-Request-Id response
// header and readable with GetRequestID. A caller's own X-Request-Id is kept
// when it is short and plain (at most 64 of A–Z a–z 0–9 . _ -), so ids can be
// followed across services; anything else is replaced, so a client cannot
// inject text into our logs.
func RequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// RequestIDHeader is canonical: indexing the Header directly
		// skips Get's and Set's canonicalization of the name.
		var id string
		if v := r.Header[RequestIDHeader]; len(v) > 0 {
			id = v[0]
		}
		if !validRequestID(id) {
			id = NewRequestID()
		}
		w.Header()[RequestIDHeader] = []string{id}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id)))
	})
}

// GetRequestID returns the request id RequestID stored in ctx, or "".
func GetRequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
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
