package server

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimit caps the connections the gateway keeps open (LOCKGW_MAX_CONNS),
// so that no client can make it hold more of them than its memory allows:
// an idle keep-alive connection costs about 20 KiB (a goroutine and its
// buffers), and 6 000 of them past a small memory limit made the collector
// run nonstop (issue 13).
//
// At the cap, a new connection takes the place of the one that has been
// idle the longest, which is closed, as nginx does: idle connections
// cannot lock new clients out. When none is idle, every connection is
// serving a request, and the new one waits in the kernel's accept queue
// until one closes.
//
// The server must report connection states to track (http.Server's
// ConnState), which is how connLimit learns which connections are idle and
// which have closed.
//
// A connection a handler takes over from net/http (hijacked: a hold's,
// handlers.HoldConns) is still open and still costs memory, though
// net/http no longer reports on it: it keeps its place, never idle, until
// its holder reports it closed (hijackedClosed).
type connLimit struct {
	net.Listener
	max      int
	replaced func() // an idle connection was closed to make room

	mu   sync.Mutex
	room *sync.Cond // signalled when a connection closes or goes idle
	open int
	idle map[net.Conn]time.Time // since when each idle connection is
	// evicted are closed to make room, no longer counted in open, and not
	// yet reported closed.
	evicted map[net.Conn]bool
	closed  bool
}

func newConnLimit(l net.Listener, max int, replaced func()) *connLimit {
	c := &connLimit{Listener: l, max: max, replaced: replaced, idle: make(map[net.Conn]time.Time), evicted: make(map[net.Conn]bool)}
	c.room = sync.NewCond(&c.mu)
	return c
}

// Accept returns the next connection once there is room for it.
func (l *connLimit) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.open >= l.max && !l.closed {
		if oldest := l.oldestIdle(); oldest != nil {
			// Its StateClosed will come; until then it is not counted,
			// so the cap is overrun by the closes in flight only.
			delete(l.idle, oldest)
			l.evicted[oldest] = true
			l.open--
			_ = oldest.Close()
			l.replaced()
			break
		}
		l.room.Wait()
	}
	if l.closed {
		_ = conn.Close()
		return nil, net.ErrClosed
	}
	l.open++
	return conn, nil
}

func (l *connLimit) oldestIdle() net.Conn {
	var oldest net.Conn
	var since time.Time
	for c, t := range l.idle {
		if oldest == nil || t.Before(since) {
			oldest, since = c, t
		}
	}
	return oldest
}

// Open is how many connections are open.
func (l *connLimit) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Close stops accepting; an Accept waiting for room returns.
func (l *connLimit) Close() error {
	l.mu.Lock()
	l.closed = true
	l.room.Broadcast()
	l.mu.Unlock()
	return l.Listener.Close()
}

// track is the server's ConnState hook.
func (l *connLimit) track(c net.Conn, state http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch state {
	case http.StateIdle:
		l.idle[c] = time.Now()
		l.room.Signal()
	case http.StateActive:
		delete(l.idle, c)
	case http.StateHijacked:
		delete(l.idle, c) // counted until hijackedClosed
	case http.StateClosed:
		delete(l.idle, c)
		if l.evicted[c] {
			delete(l.evicted, c)
			return
		}
		l.open--
		l.room.Signal()
	}
}

// hijackedClosed: a hijacked connection closed (see connLimit).
func (l *connLimit) hijackedClosed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	l.room.Signal()
}
