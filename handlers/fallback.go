package handlers

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/lockgateway/lockgateway/problem"
)

// The answers to requests no route serves, or that failed unexpectedly.

// NotFound answers paths the API does not have.
func NotFound() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteProblem(w, r, newError(problem.NotFound, "no such resource; see /openapi.yaml for the API"))
	})
}

// MethodNotAllowed answers a known path asked with a method it lacks;
// allowed lists the methods the path has, for the Allow header.
func MethodNotAllowed(allowed func(r *http.Request) []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		allow := strings.Join(allowed(r), ", ")
		w.Header().Set("Allow", allow)
		WriteProblem(w, r, newError(problem.MethodNotAllowed, fmt.Sprintf("%.20q is not allowed here; use %s", r.Method, allow)))
	})
}

// InternalError answers a request whose handler failed unexpectedly.
func InternalError() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteProblem(w, r, newError(problem.Internal, "the server could not handle the request; quote the request_id when reporting it"))
	})
}
