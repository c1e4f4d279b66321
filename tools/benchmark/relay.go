package main

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
)

// relay passes TCP connections on to one address and counts their round
// trips: per connection, each burst of bytes from the client that follows
// an answer from the server (or opens the connection) is one. A client
// that writes a request and waits for its answer, as a Redis client does
// with a command or a whole pipeline, makes one round trip per request;
// a pipeline is one however many commands it carries, and however many
// reads the server needs for it. A request longer than the relay's buffer
// (relayBuffer) that the server begins to answer before the relay has read
// its end counts twice: the count may err high, never low.
type relay struct {
	ln         net.Listener
	to         string
	roundTrips atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// relayBuffer is the most one read passes on: a pipeline of a thousand
// renewals (about 230 bytes each) in one.
const relayBuffer = 256 << 10

// newRelay listens on a free loopback port and relays to to.
func newRelay(to string) (*relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &relay{ln: ln, to: to, conns: map[net.Conn]struct{}{}}
	r.wg.Go(r.accept)
	return r, nil
}

// addr is where clients connect.
func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) accept() {
	for {
		client, err := r.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", r.to)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !r.track(client, server) {
			return
		}
		var answered atomic.Bool
		answered.Store(true) // the first bytes open a round trip
		r.wg.Go(func() {
			r.pass(client, server, func() {
				if answered.Swap(false) {
					r.roundTrips.Add(1)
				}
			})
		})
		r.wg.Go(func() { r.pass(server, client, func() { answered.Store(true) }) })
	}
}

// pass copies from src to dst, calling saw before passing each read on,
// until either end closes; then it closes both.
func (r *relay) pass(src, dst net.Conn, saw func()) {
	defer r.untrack(src, dst)
	buf := make([]byte, relayBuffer)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			saw()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// track notes a relayed pair, or closes it when the relay is closed.
func (r *relay) track(conns ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns == nil {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		r.conns[c] = struct{}{}
	}
	return true
}

func (r *relay) untrack(conns ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
		delete(r.conns, c)
	}
}

// close stops the relay and every connection it passes on.
func (r *relay) close() error {
	err := r.ln.Close()
	r.mu.Lock()
	for c := range r.conns {
		_ = c.Close()
	}
	r.conns = nil
	r.mu.Unlock()
	r.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
