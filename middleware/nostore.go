package middleware

import "net/http"

// NoStore marks every response Cache-Control: no-store. Lock state is
// correct only at the instant it is read; a cached answer is a wrong one.
func NoStore(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Cache-Control"] = []string{"no-store"} // canonical: no Set's canonicalization
		next.ServeHTTP(w, r)
	})
}
