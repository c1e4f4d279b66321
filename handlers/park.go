package handlers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/middleware"
)

// A waiting acquire served through net/http keeps, for as long as it
// waits, what net/http keeps for a request: its goroutine, parked under
// net/http's and the middlewares' frames; net/http's background reader;
// the connection's buffers (4 KiB to read, 4 + 2 KiB to write); the
// request and its contexts: 31–32 KiB a waiter at 500 waiters (issue 30).
//
// So once its first try finds the key busy (the store calls
// lockstore.WithWaitBegun's function), a waiting acquire on a plain
// HTTP/1.1 connection parks: the handler takes the connection over from
// net/http (http.Hijacker) and returns, and the wait goes on on the
// goroutine that runs the store's call (started for it, shallow). No
// goroutine reads the connection meanwhile: once a second, one sweep
// peeks at every parked connection (HoldConns.sweep), and a client that
// has gone ends its wait, as net/http's reader did at once. When the wait
// ends, the answer is written on the connection as net/http would have
// written it, and the connection goes back to net/http's keep-alive
// (HoldConns.Returned), so the client's next request on it is served as
// usual. A wait that its first try decides (the key free) never parks,
// and neither does a hold (hold_conn.go takes its connection over once
// granted), nor a request on HTTP/2 or TLS (canTakeOver).
//
// What net/http did for the request is done here instead: the access
// log line, the request metrics and the span come with the answer
// (middleware.Detach, with the status written then); the connection
// keeps its place under the connection cap while parked; the shutdown
// ends every wait at once (acquireWaiting: 503 shutting-down) and waits
// for its answer (HoldConns.Wait).

// parkWriteTimeout bounds the write of a parked acquire's answer: a
// client that does not read it loses its connection, not a goroutine.
const parkWriteTimeout = 10 * time.Second

// parkSweep is how often HoldConns.sweep looks for parked acquires whose
// clients have gone: a gone client's wait goes on up to that long, and
// a turn granted to it meanwhile is released (answered, clientGone).
const parkSweep = time.Second

// parkable reports whether an acquire that waits up to wait can park
// (see above): it waits, does not hold, and its connection can be taken
// over.
func (h *Locks) parkable(r *http.Request, wait time.Duration, holding bool) bool {
	return wait > 0 && !holding && h.conns != nil && canTakeOver(r)
}

// parkAcquire runs a parkable acquire: call (the store's, under
// acquireWaiting) on a goroutine of its own, and answer (which writes the
// outcome, as the handler would have) on the handler's goroutine when
// the outcome comes before the wait begins, or else, parked, once it
// comes. It returns what answer returned, nil once parked.
func parkAcquire[G any](h *Locks, w http.ResponseWriter, r *http.Request, what string, wait time.Duration,
	call func(ctx context.Context) (G, error),
	answer func(w http.ResponseWriter, r *http.Request, got G, err error) *holdStream,
) *holdStream {
	p := &parking[G]{began: make(chan struct{}), done: make(chan struct{})}
	// The wait's context: the request's values, and a cancel of its own,
	// which net/http's cancel of the request (the client left) reaches
	// only until the connection is taken over, since net/http cancels the
	// request once the handler returns.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	stop := context.AfterFunc(r.Context(), func() {
		if !p.parked.Load() {
			cancel()
		}
	})
	go p.run(h, func() (G, error) {
		return acquireWaiting(lockstore.WithWaitBegun(ctx, p.begin), h, what, wait, call)
	})
	select {
	case <-p.done:
	case <-p.began:
		if p.park(h, w, r.WithContext(ctx), cancel, answer) {
			return nil
		}
		<-p.done
	}
	stop()
	cancel()
	if p.panicked != nil {
		panic(p.panicked) // the request's recoverer answers it
	}
	return answer(w, r, p.got, p.err)
}

// parking is one parkable acquire: its outcome, and whether it parked.
type parking[G any] struct {
	began     chan struct{} // closed when the store begins to wait
	beganOnce sync.Once
	done      chan struct{} // closed with the outcome, unless parked
	parked    atomic.Bool

	mu       sync.Mutex
	finished bool
	got      G
	err      error
	panicked any
	answer   func(got G, err error) // set when parked: answers on the connection
}

func (p *parking[G]) begin() { p.beganOnce.Do(func() { close(p.began) }) }

// run runs acquire and hands its outcome to the handler, or answers it
// on the connection when the acquire parked meanwhile.
func (p *parking[G]) run(h *Locks, acquire func() (G, error)) {
	var got G
	var err error
	var panicked any
	func() {
		defer func() {
			if v := recover(); v != nil {
				panicked = v
				h.log.Error().Interface("panic", v).Bytes("stack", debug.Stack()).Msg("a waiting acquire panicked")
			}
		}()
		got, err = acquire()
	}()
	p.mu.Lock()
	p.got, p.err, p.panicked, p.finished = got, err, panicked, true
	answer := p.answer
	if answer == nil {
		close(p.done)
	}
	p.mu.Unlock()
	if answer == nil {
		return
	}
	if panicked != nil {
		err = errors.New("handlers: the waiting acquire panicked")
	}
	answer(got, err)
}

// park takes r's connection over and lets the handler return; false when
// the outcome came first, or net/http would not give the connection. r
// is a copy of the request with the wait's context, for the answer.
func (p *parking[G]) park(h *Locks, w http.ResponseWriter, r *http.Request, cancel context.CancelFunc,
	answer func(w http.ResponseWriter, r *http.Request, got G, err error) *holdStream,
) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return false
	}
	// Counted before net/http lets the connection go, as a hold's.
	h.conns.wg.Add(1)
	rwc, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		h.conns.wg.Done()
		return false
	}
	p.parked.Store(true)
	c := &parkedConn{Conn: rwc, conns: h.conns, cancel: cancel, keep: !r.Close}
	if n := rw.Reader.Buffered(); n > 0 { // sent after the request (pipelined): net/http's again
		b, _ := rw.Reader.Peek(n)
		c.pipelined = bytes.Clone(b)
	}
	c.detached = middleware.Detach(r)
	header := w.Header().Clone() // what the middlewares and the handler set so far
	// The request as the answer needs it (parkAcquire's copy), without
	// its body, which would keep net/http's buffers of the connection.
	r.Body, r.GetBody = http.NoBody, nil
	p.answer = func(got G, err error) {
		rec := &recorder{header: header}
		answer(rec, r, got, err)
		c.respond(rec)
	}
	h.conns.addParked(c)
	return true
}

// parkedConn is a connection taken over from net/http while its request
// waits.
type parkedConn struct {
	net.Conn // as net/http had it (the server's wrappers included)
	conns    *HoldConns
	cancel   context.CancelFunc // ends the wait: the client went away
	detached *middleware.Detached
	keep     bool        // the request allows keep-alive
	gone     atomic.Bool // the sweep found the client gone

	pipelined []byte // what net/http had read past the request
}

// sweepOnce ends the wait of a parked acquire whose client has gone.
func (c *parkedConn) sweepOnce() {
	if !c.gone.Load() && connGone(c.Conn) {
		c.gone.Store(true)
		c.cancel()
	}
}

// respond writes rec's answer on the connection, then gives it back to
// net/http, or closes it.
func (c *parkedConn) respond(rec *recorder) {
	gone := c.gone.Load()
	keep := c.keep && !gone && c.conns.returning.Load() && !c.conns.stopping()
	out := rec.response(keep)
	var err error
	if !gone {
		_ = c.SetWriteDeadline(time.Now().Add(parkWriteTimeout))
		_, err = c.Write(out)
		_ = c.SetWriteDeadline(time.Time{})
	}
	if c.detached != nil {
		c.detached.EndWith(rec.status, int64(rec.body.Len()))
	}
	handedBack := keep && err == nil && c.conns.handBack(c.returned())
	if !handedBack {
		if !gone && err == nil {
			lingerClose(c.Conn)
		}
		_ = c.Close()
	}
	c.conns.removeParked(c, !handedBack)
}

// returned is the connection to give back to net/http (returnedConn).
func (c *parkedConn) returned() *returnedConn {
	r := &returnedConn{Conn: c.Conn, unread: c.pipelined}
	if idle := c.conns.idleTimeout; idle > 0 {
		r.idleUntil = time.Now().Add(idle)
	}
	return r
}

// returnedConn is a parked acquire's connection given back to net/http,
// which takes it for a new one. It reads first what net/http had read
// past the request (pipelined). And until the client's next request
// begins, its read deadline is at least the keep-alive's idle timeout,
// as for any connection idle after a response: net/http gives a new
// connection's first request only its header timeout (5 s), and a
// client that reused the connection later would find it closed.
type returnedConn struct {
	net.Conn
	conns     *HoldConns // set by handBack
	unread    []byte
	idleUntil time.Time   // zero: no idle timeout
	read      atomic.Bool // the client's next request has begun
}

func (c *returnedConn) Read(p []byte) (int, error) {
	if len(c.unread) > 0 {
		n := copy(p, c.unread)
		c.unread = c.unread[n:]
		c.begun()
		return n, nil
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.begun()
	}
	return n, err
}

// begun: the client's next request has begun.
func (c *returnedConn) begun() {
	if !c.read.Load() && c.read.CompareAndSwap(false, true) && c.conns != nil {
		c.conns.forget(c)
	}
}

func (c *returnedConn) Close() error {
	if c.conns != nil {
		c.conns.forget(c)
	}
	return c.Conn.Close()
}

func (c *returnedConn) SetReadDeadline(t time.Time) error {
	// Only a deadline to come is moved: one in the past ends a read now
	// (net/http's abortPendingRead), and zero is none.
	if !c.read.Load() && t.After(time.Now()) && t.Before(c.idleUntil) {
		t = c.idleUntil
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *returnedConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// NetConn lets handlers peek at the socket underneath (clientGone).
func (c *returnedConn) NetConn() net.Conn { return c.Conn }

// HandedBack marks a connection net/http serves again after a parked
// acquire: idle until its next request (server.connLimit).
func (c *returnedConn) HandedBack() {}

// lingerClose closes c's writing half and waits, up to linger, for the
// client to close its own, as net/http does: closed with the client's
// bytes unread, the connection would be reset, and a reset can discard
// the answer before the client reads it.
func lingerClose(c net.Conn) {
	cw, ok := closeWriter(c)
	if !ok || cw.CloseWrite() != nil {
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(linger))
	var buf [64]byte
	for {
		if _, err := c.Read(buf[:]); err != nil {
			return
		}
	}
}

// recorder is the answer of a parked acquire, written by the handler's
// own code (the answer function) and sent by respond.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(p)
}

// response is the answer as net/http frames a response with a body it
// knows the length of; keep: the connection stays open after it.
func (r *recorder) response(keep bool) []byte {
	r.WriteHeader(http.StatusOK)
	h := r.header
	if _, ok := h["Date"]; !ok {
		h["Date"] = []string{time.Now().UTC().Format(http.TimeFormat)}
	}
	h[hdrContentLength] = []string{strconv.Itoa(r.body.Len())}
	if !keep {
		h["Connection"] = []string{"close"}
	}
	var b bytes.Buffer
	b.Grow(256 + r.body.Len())
	fmt.Fprintf(&b, "HTTP/1.1 %03d %s\r\n", r.status, http.StatusText(r.status))
	_ = h.Write(&b)
	b.WriteString("\r\n")
	b.Write(r.body.Bytes())
	return b.Bytes()
}
