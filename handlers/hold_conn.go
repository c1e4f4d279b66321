package handlers

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/lockgateway/lockgateway/middleware"
)

// A hold served through net/http keeps, for as long as it lasts, what
// net/http keeps for a request: its goroutine (parked under net/http's
// and the middlewares' frames, an 8 KiB stack), net/http's background
// reader (2 KiB more), the connection's buffers (4 KiB to read, 4 + 2 KiB
// to write, written on every event and so resident), the request and its
// contexts: most of 45 KiB a hold (issue 28, docs/operations.md).
//
// So once the grant is sent, a hold on a plain HTTP/1.1 connection takes
// the connection over (http.Hijacker) and serves the rest of the stream
// on it directly (serve): one goroutine, started small, which waits in a
// read of the connection, both to see the client go (the read's EOF) and
// as the hold's timer (the read's deadline); events from elsewhere (a
// renewal's outcome, a DELETE through this gateway, the shutdown) wake it
// by moving the deadline to the past. Each event is written in one write,
// through no buffer, framed as the chunks net/http had begun.
//
// What net/http did for the request is done here instead:
//   - the access log line, the request metrics and the span come at the
//     hold's end (middleware.Detach);
//   - the connection keeps its place under the connection cap until it
//     closes (HoldConns reports the close to the server);
//   - the server's shutdown waits for these holds (HoldConns.Wait), each
//     of which sends its final event (shutdown), as run's do.
//
// HTTP/2 and TLS connections cannot be taken over this way (HTTP/2 has no
// connection per request; a TLS connection would keep crypto/tls's
// buffers, the larger part of what this saves): their holds, and those of
// a Locks without HoldConns, stay with net/http (run).

// HoldConns are the holds served on connections taken over from net/http,
// for the server: their count under the connection cap, and the wait for
// them at shutdown. Give one to a Locks with ServeHoldsOn.
type HoldConns struct {
	closed func() // a connection closed; may be nil

	mu      sync.Mutex
	streams map[*holdStream]struct{}
	wg      sync.WaitGroup
}

// NewHoldConns returns an empty set; closed (may be nil) is called each
// time one of its connections closes: net/http no longer counts them
// (server.connLimit).
func NewHoldConns(closed func()) *HoldConns {
	return &HoldConns{closed: closed, streams: make(map[*holdStream]struct{})}
}

// ServeHoldsOn lets holds take their connections over where they can,
// into conns. Call it before serving.
func (h *Locks) ServeHoldsOn(conns *HoldConns) {
	h.conns = conns
	if h.shutdown != nil {
		// When the gateway stops, every hold sees it (h.stopping) at
		// once: waiting in a read, it must be woken to look.
		context.AfterFunc(h.shutdown, conns.stop)
	}
}

// Wait waits until every hold served on its connection has ended, or ctx
// ends: then it closes their connections and returns ctx's error. Call it
// once the server has shut down (no request can start another hold) and
// the Locks' stopping channel is closed (every hold is ending).
func (c *HoldConns) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	c.mu.Lock()
	for s := range c.streams {
		_ = s.conn.Close()
	}
	c.mu.Unlock()
	return ctx.Err()
}

// add lists s, served on its connection, for stop and Wait (counted by
// them since takeOver's wg.Add).
func (c *HoldConns) add(s *holdStream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.streams[s] = struct{}{}
}

func (c *HoldConns) remove(s *holdStream) {
	c.mu.Lock()
	delete(c.streams, s)
	c.mu.Unlock()
	if c.closed != nil {
		c.closed()
	}
	c.wg.Done()
}

// stop wakes every hold, to see the gateway stopping.
func (c *HoldConns) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s := range c.streams {
		s.conn.wake()
	}
}

// canTakeOver reports whether r's hold can be served on its connection:
// HTTP/1.1 (whose response net/http frames as chunks) on a plain TCP
// connection (handlers.ConnContext tells which), under RequestID (which
// keeps the mark middleware.Detach sets).
func canTakeOver(r *http.Request) bool {
	if r.ProtoMajor != 1 || r.ProtoMinor != 1 || r.TLS != nil || middleware.GetRequestID(r.Context()) == "" {
		return false
	}
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	for c != nil {
		switch c.(type) {
		case *tls.Conn:
			return false
		case *net.TCPConn:
			return true
		}
		inner, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return false
		}
		c = inner.NetConn()
	}
	return false
}

// holdConn is a connection taken over from net/http for a hold's stream.
type holdConn struct {
	net.Conn // as net/http had it (the server's wrappers included)
	// wakeFn is wake, made once (a method value is an allocation).
	wakeFn   func()
	detached *middleware.Detached // nil: not under RequestID
	written  int64                // event bytes written, for the access log
}

// aLongTimeAgo is a read deadline that has passed: it ends a read at once.
var aLongTimeAgo = time.Unix(1, 0)

// wake ends serve's read at once, to look at what changed.
func (c *holdConn) wake() { _ = c.SetReadDeadline(aLongTimeAgo) }

// write sends p as one chunk of the response's chunked body.
func (c *holdConn) write(p []byte) error {
	_ = c.SetWriteDeadline(time.Now().Add(2 * sseHeartbeat))
	chunk := make([]byte, 0, len(p)+16)
	chunk = strconv.AppendInt(chunk, int64(len(p)), 16)
	chunk = append(append(append(chunk, "\r\n"...), p...), "\r\n"...)
	_, err := c.Write(chunk)
	if err == nil {
		c.written += int64(len(p))
	}
	return err
}

// takeOver takes the stream's connection over from net/http (see above)
// and starts serving it; it reports false, leaving the stream to run, when
// net/http would not give it. The handler must return at once after true.
func (s *holdStream) takeOver() bool {
	// Counted before net/http lets the connection go: from then on the
	// server's Shutdown no longer waits for it, and may return, and Wait
	// must find it counted.
	s.h.conns.wg.Add(1)
	rwc, _, err := s.rc.Hijack() // the bufio pair is net/http's buffers: not kept
	if err != nil {
		s.h.conns.wg.Done()
		return false
	}
	c := &holdConn{Conn: rwc, detached: middleware.Detach(s.r)}
	c.wakeFn = c.wake
	// Nothing of the request stays, but the span's context.
	s.conn, s.w, s.rc, s.r = c, nil, nil, nil
	s.h.open.wakeOn(s.open, c.wakeFn)
	s.h.conns.add(s)
	go s.serve()
	return true
}

// serve waits for what ends or feeds the stream until the hold ends, as
// run does, in a read of the connection: the read's deadline is the
// timer, and a wake ends it early (see above).
func (s *holdStream) serve() {
	defer s.hangUp()
	// The request's recoverer is not above this goroutine: a panic here
	// would end the process, and every other hold with it.
	defer func() {
		if p := recover(); p != nil {
			s.h.log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).
				Msg("hold panicked; its stream ends, its lease at its TTL")
		}
	}()
	s.renew(time.Now().Add(spread(s.interval)))
	var buf [64]byte
	for {
		// The deadline first, then a look at the channels: a wake
		// after the look ends the read; one before it was for an event
		// the look sees.
		_ = s.conn.SetReadDeadline(s.next())
		if !s.poll() {
			return
		}
		_, err := s.conn.Read(buf[:])
		switch {
		case err == nil:
			// Bytes after the request (pipelined, say): the response
			// says Connection: close, and nothing here reads them.
		case errors.Is(err, os.ErrDeadlineExceeded):
			// Woken, or time is up: a renewal that came in time
			// counts before the lost deadline it moves.
			if !s.poll() || !s.due() {
				return
			}
		default: // the client closed the connection, or it broke
			s.h.letGo(s.lease, s.opts.lockDelay)
			return
		}
	}
}

// poll acts on what has come on the channels run waits on, without
// waiting, and reports whether the hold goes on.
func (s *holdStream) poll() bool {
	for {
		select {
		case got := <-s.renewed:
			if !s.renewal(got) {
				return false
			}
		case <-s.open.released:
			s.end(s.open.freed())
			return false
		case <-s.h.stopping:
			s.endByGateway(holdShutdown)
			return false
		default:
			return true
		}
	}
}

// linger is how long a stream's connection waits for the client to close
// its end after the last chunk, as net/http's does: closed with the
// client's bytes unread, it would be reset, and a reset can discard the
// final event before the client reads it.
const linger = 500 * time.Millisecond

// hangUp ends a stream served on its connection: what run's end does
// (finish), the response's last chunk, its access line and metrics, and
// the connection's close.
func (s *holdStream) hangUp() {
	s.finish()
	c := s.conn
	gone := s.ended == holdClientGone
	if !gone {
		_ = c.SetWriteDeadline(time.Now().Add(linger))
		_, _ = c.Write([]byte("0\r\n\r\n"))
	}
	if c.detached != nil {
		c.detached.End(c.written)
	}
	if !gone {
		if s.lingerForClose(c) && s.releaseOnClose {
			// The client closed its end: after the gateway's end, that
			// is the holder letting go (endByGateway).
			s.h.releaseHeld(s.lease)
		}
	}
	_ = c.Close()
	s.h.conns.remove(s)
}

// lingerForClose closes the writing half of c and reads what the client
// still sends until it closes its end, or for linger (after the gateway
// ended the hold, closeWait: endByGateway): closed with the
// client's bytes unread, the connection would be reset, which can discard
// the final event before the client reads it. It reports whether the
// client closed (or the connection broke) within that time; false when it
// was still open, or when c cannot close half of itself.
func (s *holdStream) lingerForClose(c *holdConn) bool {
	cw, ok := closeWriter(c.Conn)
	if !ok {
		return false
	}
	if cw.CloseWrite() != nil {
		return true // broken already: the client is gone
	}
	wait := linger
	if s.releaseOnClose {
		wait = closeWait(s.lease.ttl)
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	var buf [64]byte
	for {
		if _, err := c.Read(buf[:]); err != nil {
			return !errors.Is(err, os.ErrDeadlineExceeded)
		}
	}
}

// closeWriter is the connection under c's wrappers that can close its
// writing half alone.
func closeWriter(c net.Conn) (interface{ CloseWrite() error }, bool) {
	for {
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			return cw, true
		}
		inner, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil, false
		}
		c = inner.NetConn()
	}
}
