package server

import (
	"bytes"
	"fmt"
	"net"
	"net/http"

	"github.com/rs/zerolog"

	"github.com/lockgateway/lockgateway/handlers"
	"github.com/lockgateway/lockgateway/middleware"
	"github.com/lockgateway/lockgateway/problem"
)

// net/http answers a request it cannot parse (a malformed percent-escape
// in the path such as /locks/%zz, a header line without a colon, no Host)
// itself, before any handler runs, with a text/plain "400 Bad Request" and
// a closed connection; and headers over MaxHeaderBytes with a text/plain
// "431 Request Header Fields Too Large". rawErrorListener's connections
// rewrite exactly those responses into the problem+json every other error
// is.
//
// net/http writes it with one Write straight to the connection (server.go,
// conn.serve), and its headers come in an order net/http's own header
// writer never uses for handler responses (Content-Type before
// Connection, sorted output would put Connection first), so a handler's
// response is never mistaken for it. Should a Go release change the text,
// the response passes through unchanged: the test of this file says so.
type rawErrorListener struct {
	net.Listener
	log zerolog.Logger // one access line per rewritten response
}

func (l rawErrorListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &rawErrorConn{Conn: c, log: l.log}, nil
}

type rawErrorConn struct {
	net.Conn
	log zerolog.Logger
}

// NetConn lets handlers peek at the socket underneath (clientGone).
func (c *rawErrorConn) NetConn() net.Conn { return c.Conn }

func (c *rawErrorConn) Write(p []byte) (int, error) {
	kind, detail, ok := rawErrorDetail(p)
	if !ok {
		return c.Conn.Write(p)
	}
	id := middleware.NewRequestID()
	body := handlers.ProblemJSON(kind, detail, id)
	out := fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/problem+json\r\nContent-Length: %d\r\nX-Request-Id: %s\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n%s",
		kind.Status, http.StatusText(kind.Status), len(body), id, body)
	// The access line every request gets, with what is known of this one.
	c.log.Info().Str("route", "unparsed").Int("status", kind.Status).Int("bytes", len(out)).Str("request_id", id).Msg("request")
	if _, err := c.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

const (
	rawPrefix         = "HTTP/1.1 400 Bad Request"
	rawTooLargePrefix = "HTTP/1.1 431 Request Header Fields Too Large"
	rawHeaders        = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
)

// rawErrorDetail recognises net/http's own 400 and 431 and words their
// problem. The text after "400 Bad Request: " (when there is one) is a
// fixed phrase of net/http's, such as "missing required Host header"; it
// is quoted only when short and plain ASCII.
func rawErrorDetail(p []byte) (problem.Kind, string, bool) {
	if len(p) > 512 {
		return problem.Kind{}, "", false
	}
	if bytes.Equal(p, []byte(rawTooLargePrefix+rawHeaders+rawTooLargePrefix[len("HTTP/1.1 "):])) {
		return problem.HeadersTooLarge, fmt.Sprintf("the request's headers are over the %d KiB limit; send fewer or shorter headers", maxHeaderBytes>>10), true
	}
	if !bytes.HasPrefix(p, []byte(rawPrefix)) {
		return problem.Kind{}, "", false
	}
	status, _, ok := bytes.Cut(p, []byte(rawHeaders))
	if !ok {
		return problem.Kind{}, "", false
	}
	if reason, ok := bytes.CutPrefix(status, []byte(rawPrefix+": ")); ok && len(reason) <= 80 && plainASCII(reason) {
		return problem.Malformed, "the request could not be parsed: " + string(reason) + "; fix the request line or headers and retry", true
	}
	return problem.Malformed, "the request could not be parsed: the path must be percent-encoded (% starts an escape such as %2F; write a literal % as %25) and each header line must be \"Name: value\"", true
}

func plainASCII(b []byte) bool {
	for _, c := range b {
		if c < ' ' || c > '~' {
			return false
		}
	}
	return true
}

// maxHeaderBytes is the most request-header bytes a request may carry
// (http.Server.MaxHeaderBytes); past it net/http answers 431 itself, which
// rawErrorConn rewrites.
const maxHeaderBytes = 32 << 10
