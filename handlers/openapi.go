package handlers

import (
	"net/http"
	"strconv"
)

// OpenAPI serves GET /openapi.yaml: the spec the service was built with.
func OpenAPI(spec []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Header().Set("Content-Length", strconv.Itoa(len(spec)))
		_, _ = w.Write(spec)
	})
}
