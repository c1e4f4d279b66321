package middleware

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"
	"github.com/rs/zerolog"
)

// AccessLog writes one line per request: method, route pattern, status,
// duration, bytes written and request id. It logs the route pattern
// ("/locks/*"), not the path, and never a header, so tokens, API keys and
// Authorization values cannot reach the log.
func AccessLog(log zerolog.Logger) func(http.Handler) http.Handler {
	return accessLog(func(l *accessLine) { l.log(log) })
}

// AccessLogJSON is AccessLog for a JSON zerolog logger that writes to out,
// has no fields of its own and one hook, which adds the "time" field as
// stamp's text for the moment (in zerolog.TimeFieldFormat, RFC 3339). It
// writes the line AccessLog would, byte for byte, itself: zerolog's event
// (a pooled buffer, a call per field, the hook) was about half of a
// line's cost. A line it could not write exactly so (a string to
// escape, zerolog's field names or formats changed) goes through log.
func AccessLogJSON(log zerolog.Logger, out io.Writer, stamp func(time.Time) string) func(http.Handler) http.Handler {
	return accessLog(func(l *accessLine) {
		level := zerolog.InfoLevel
		if l.status >= 500 {
			level = zerolog.WarnLevel
		}
		if level < log.GetLevel() || level < zerolog.GlobalLevel() {
			return
		}
		levelText := zerolog.LevelFieldMarshalFunc(level)
		if !plainJSON(l.method) || !plainJSON(l.route) || !plainJSON(l.requestID) || !plainJSON(levelText) ||
			zerolog.LevelFieldName != "level" || zerolog.TimestampFieldName != "time" ||
			zerolog.MessageFieldName != "message" || zerolog.TimeFieldFormat != time.RFC3339 {
			l.log(log)
			return
		}
		bp := lines.Get().(*[]byte)
		b := append((*bp)[:0], `{"level":"`...)
		b = append(b, levelText...)
		b = append(b, `","method":"`...)
		b = append(b, l.method...)
		b = append(b, `","route":"`...)
		b = append(b, l.route...)
		b = append(b, `","status":`...)
		b = strconv.AppendInt(b, int64(l.status), 10)
		b = append(b, `,"duration_ms":`...)
		b = appendMillis(b, l.micros)
		b = append(b, `,"bytes":`...)
		b = strconv.AppendInt(b, int64(l.bytes), 10)
		b = append(b, `,"request_id":"`...)
		b = append(b, l.requestID...)
		b = append(b, `","time":"`...)
		b = append(b, stamp(zerolog.TimestampFunc())...)
		b = append(b, "\",\"message\":\"request\"}\n"...)
		if _, err := out.Write(b); err != nil { // as zerolog reports it
			if zerolog.ErrorHandler != nil {
				zerolog.ErrorHandler(err)
			} else {
				fmt.Fprintf(os.Stderr, "zerolog: could not write event: %v\n", err)
			}
		}
		*bp = b
		lines.Put(bp)
	})
}

var lines = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// accessLine is what an access-log line says of a request.
type accessLine struct {
	method, route, requestID string
	status, bytes            int
	micros                   int64
}

func accessLog(write func(*accessLine)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			ww := chimw.NewWrapResponseWriter(w, r.ProtoMajor)
			defer func() {
				status := ww.Status()
				if status == 0 { // nothing written: net/http sends 200
					status = http.StatusOK
				}
				write(&accessLine{
					method:    r.Method,
					route:     routePattern(r),
					requestID: GetRequestID(r.Context()),
					status:    status,
					bytes:     ww.BytesWritten(),
					micros:    time.Since(start).Microseconds(),
				})
			}()
			next.ServeHTTP(ww, r)
		})
	}
}

// log writes l through zerolog.
func (l *accessLine) log(log zerolog.Logger) {
	ev := log.Info()
	if l.status >= 500 {
		ev = log.Warn()
	}
	var ms [24]byte
	ev.Str("method", l.method).
		Str("route", l.route).
		Int("status", l.status).
		RawJSON("duration_ms", appendMillis(ms[:0], l.micros)).
		Int("bytes", l.bytes).
		Str("request_id", l.requestID).
		Msg("request")
}

// plainJSON: s is its own JSON string text (printable ASCII, no quote or
// backslash), as zerolog would write it.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// routePattern is the chi route r matched ("/locks/*"), or "unmatched":
// a pattern, never a path, so neither logs nor metric labels grow with keys.
// chi builds the pattern anew on each call: it is asked once.
func routePattern(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
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
