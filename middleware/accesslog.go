package middleware

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"
	"github.com/rs/zerolog"
)

// AccessLog writes one line per request: method, route pattern, status,
// duration, bytes written and request id, and "force":true on a DELETE
// that asked for a forced release (whatever it was answered: an audit
// wants the refusals too). It logs the route pattern ("/locks/*"), not the
// path, and never a header, so tokens, API keys and Authorization values
// cannot reach the log.
func AccessLog(log zerolog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			ww := chimw.NewWrapResponseWriter(w, r.ProtoMajor)
			defer func() {
				status := ww.Status()
				if status == 0 { // nothing written: net/http sends 200
					status = http.StatusOK
				}
				l := accessLine{
					method: r.Method, route: routePattern(r), id: GetRequestID(r.Context()),
					status: status, start: start, bytes: int64(ww.BytesWritten()),
					force: r.Method == http.MethodDelete && r.URL.RawQuery != "" && forced(r.URL.RawQuery),
				}
				if d := detached(r); d != nil {
					// Its line when it ends, keeping only the line's
					// fields (not r, nor ww and the connection behind it).
					kept := l
					d.atEnd(func(after int64) { kept.write(log, after) })
					return
				}
				l.write(log, 0)
			}()
			next.ServeHTTP(ww, r)
		})
	}
}

// accessLine is what a request's access line says.
type accessLine struct {
	method, route, id string
	status            int
	force             bool
	start             time.Time
	bytes             int64 // written when the handler returned
}

// write logs the line; after is the bytes written since (a detached
// request's, detach.go).
func (l *accessLine) write(log zerolog.Logger, after int64) {
	ev := log.Info()
	if l.status >= 500 {
		ev = log.Warn()
	}
	if l.force {
		ev.Bool("force", true)
	}
	var ms [24]byte
	ev.Str("method", l.method).
		Str("route", l.route).
		Int("status", l.status).
		RawJSON("duration_ms", appendMillis(ms[:0], time.Since(l.start).Microseconds())).
		Int64("bytes", l.bytes+after).
		Str("request_id", l.id).
		Msg("request")
}

// forced: a DELETE's query asks for a forced release (force=true).
func forced(rawQuery string) bool {
	values, err := url.ParseQuery(rawQuery)
	return err == nil && slices.Contains(values["force"], "true")
}

// routePattern is the chi route r matched ("/locks/*"), or "unmatched":
// a pattern, never a path, so neither logs nor metric labels grow with keys.
// RoutePattern joins and trims the patterns anew on each call; chi (since
// v5.2.2) stores the same string in r.Pattern when it routes r, which
// AccessLog and Observe both see when no middleware between them and the
// router replaced r.
func routePattern(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		if len(rc.RoutePatterns) > 0 && r.Pattern != "" {
			return r.Pattern
		}
		if p := rc.RoutePattern(); p != "" {
			return p
		}
	}
	return "unmatched"
}

// appendMillis appends micros/1000 as zerolog's Float64 writes it (the
// shortest decimal that reads back as the same float64: "0", "0.005",
// "1.5", "12.345"), without strconv's float formatting, a measurable share
// of a log line. micros ≥ 0; below 2^53 the three-decimal text is that
// shortest form, as floats that far apart from 0.001 cannot share it.
func appendMillis(dst []byte, micros int64) []byte {
	dst = strconv.AppendInt(dst, micros/1000, 10)
	frac := micros % 1000
	if frac == 0 {
		return dst
	}
	digits := [3]byte{byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
	n := 3
	for digits[n-1] == '0' {
		n--
	}
	return append(append(dst, '.'), digits[:n]...)
}
