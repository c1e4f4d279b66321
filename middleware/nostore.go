package middleware

import "net/http"

// NoStore marks every response Cache-Control: no-store. Lock state is
// correct only at the instant it is read; a cached answer is a wrong one.
func NoStore(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}
