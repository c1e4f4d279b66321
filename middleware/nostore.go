package middleware

import "net/http"

// NoStore marks every response Cache-Control: no-store. Lock state is
// correct only at the instant it is read; a cached answer is a wrong one.
func NoStore(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Cache-Control"] = noStore // canonical: no Set's canonicalization
		next.ServeHTTP(w, r)
	})
}

// noStore is every response's value, not a slice made per request: Header's
// Set, Add and Del replace a value's slice and never write into it, and at
// full capacity an append copies it.
var noStore = []string{"no-store"}[:1:1]
