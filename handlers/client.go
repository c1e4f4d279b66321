package handlers

import (
	"context"
	"errors"
	"net"
	"net/http"
	"syscall"
)

type connKey struct{}

// ConnContext is for http.Server's ConnContext: it lets the lock handlers
// look at a request's connection, to tell whether its client has gone.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// clientGone reports whether r's client has gone away: net/http saw its
// connection close and cancelled the request, or the connection has
// received the client's FIN or RST, which net/http only notices a moment
// later. The second catches a client that left just before its grant
// came, which would otherwise be sent to a closed connection.
func clientGone(r *http.Request) bool {
	if errors.Is(r.Context().Err(), context.Canceled) {
		return true
	}
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	for c != nil {
		if sc, ok := c.(syscall.Conn); ok {
			return peerClosed(sc)
		}
		inner, ok := c.(interface{ NetConn() net.Conn }) // *tls.Conn and wrappers like it
		if !ok {
			return false
		}
		c = inner.NetConn()
	}
	return false
}
