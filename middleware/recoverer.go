package middleware

import (
	"net/http"
	"runtime/debug"

	"github.com/rs/zerolog"
)

// Recoverer turns a panic in a handler into one error log line, with the
// stack, and the response internalError writes (a 500 problem). The panic
// value goes to the log only, never to the client.
//
// http.ErrAbortHandler is re-panicked: it is net/http's way to abort a
// response on purpose.
func Recoverer(log zerolog.Logger, internalError http.Handler) func(http.Handler) http.Handler {
	if internalError == nil {
		panic("middleware.Recoverer: nil internalError handler")
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				rec := recover()
				if rec == nil {
					return
				}
				if rec == http.ErrAbortHandler {
					panic(rec)
				}
				log.Error().
					Str("request_id", GetRequestID(r.Context())).
					Str("method", r.Method).
					Interface("panic", rec).
					Bytes("stack", debug.Stack()).
					Msg("handler panicked")
				internalError.ServeHTTP(w, r)
			}()
			next.ServeHTTP(w, r)
		})
	}
}
