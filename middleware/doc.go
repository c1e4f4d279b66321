// Package middleware holds lockgateway's HTTP middleware, one per file, each
// a func(http.Handler) http.Handler that other chi services can import.
// Options are checked when a middleware is built, never per request.
package middleware
