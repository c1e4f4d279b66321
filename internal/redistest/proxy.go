package redistest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy on a free loopback port that delays every byte by a
// fixed latency in each direction, like a distant network. It delays, it
// does not throttle: data read at t is written at t+delay, however much is
// in flight.
type Proxy struct {
	target string
	delay  atomic.Int64 // time.Duration
	// replyDelay is added to delay on the way back only (SetReplyDelay).
	replyDelay atomic.Int64
	ln         net.Listener

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup

	flights *Flights // nil: nothing is counted
}

// Flights counts, across the proxies that share it (Proxy.Count), how many
// of them have a request in flight: read from the client, its reply not
// yet written back. A proxy's delay makes every reply come back at least
// two delays after its request, so callers that send to every proxy at
// once have them all in flight together, and callers that send to one
// after the other's reply never have more than one: an order of events,
// which no scheduler's delay turns into the other.
type Flights struct {
	mu       sync.Mutex
	awaiting map[net.Conn]*Proxy // a client connection whose request awaits its reply
	most     int
}

// NewFlights is a counter for Proxy.Count.
func NewFlights() *Flights { return &Flights{awaiting: make(map[net.Conn]*Proxy)} }

// Most is the largest number of proxies seen with a request in flight at
// once since the last Reset.
func (f *Flights) Most() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.most
}

// Reset starts a new count from the requests in flight now.
func (f *Flights) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.most = f.inFlight()
}

func (f *Flights) inFlight() int {
	proxies := make(map[*Proxy]struct{}, len(f.awaiting))
	for _, p := range f.awaiting {
		proxies[p] = struct{}{}
	}
	return len(proxies)
}

func (f *Flights) request(p *Proxy, client net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.awaiting[client] = p
	f.most = max(f.most, f.inFlight())
}

func (f *Flights) reply(client net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.awaiting, client)
}

// Count makes p count its requests in f. Call it before the proxy carries
// the requests to count.
func (p *Proxy) Count(f *Flights) { p.mu.Lock(); p.flights = f; p.mu.Unlock() }

// NewProxy starts a proxy to target (host:port) adding delay each way, and
// stops it when the test ends.
func NewProxy(t testing.TB, target string, delay time.Duration) *Proxy {
	t.Helper()
	var ln net.Listener
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("redistest: proxy listen: %v", err)
		}
		if l.Addr().(*net.TCPAddr).Port != 6379 {
			ln = l
			break
		}
		_ = l.Close()
	}
	if ln == nil {
		t.Fatal("redistest: proxy: no free port")
	}
	p := &Proxy{target: target, ln: ln, conns: make(map[net.Conn]struct{})}
	p.delay.Store(int64(delay))
	p.wg.Go(p.serve)
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is the proxy's redis:// URL.
func (p *Proxy) URL() string { return "redis://" + p.Addr() + "/0" }

// SetDelay changes the delay of everything read from now on.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// SetReplyDelay adds d to the delay of what the server sends back, from
// now on: the server runs a command at once, and its reply is late (a
// slow path back, or a gateway paused before reading).
func (p *Proxy) SetReplyDelay(d time.Duration) { p.replyDelay.Store(int64(d)) }

// Close stops accepting, cuts every proxied connection and waits for the
// proxy's goroutines. Safe to call twice.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil // closed: track refuses anything accepted from now on
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !p.track(client) || !p.track(server) {
			_ = client.Close()
			_ = server.Close()
			continue
		}
		p.wg.Go(func() {
			p.pipe(server, client, nil, func() {
				if f := p.counted(); f != nil {
					f.request(p, client)
				}
			})
		})
		p.wg.Go(func() {
			p.pipe(client, server, &p.replyDelay, func() {
				if f := p.counted(); f != nil {
					f.reply(client)
				}
			})
		})
	}
}

type chunk struct {
	data []byte
	due  time.Time
}

// counted is the proxy's Flights; nil when it counts nothing.
func (p *Proxy) counted() *Flights {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.flights
}

// pipe copies src to dst, each chunk delay (plus extra, when not nil)
// after it was read; when either side ends, both connections are closed.
// seen runs when a chunk is read from the client (the request side) or
// written to it (the reply side).
func (p *Proxy) pipe(dst, src net.Conn, extra *atomic.Int64, seen func()) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	queue := make(chan chunk, 1024)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				if extra == nil { // client to server: a request
					seen()
				}
				d := p.delay.Load()
				if extra != nil {
					d += extra.Load()
				}
				queue <- chunk{buf[:n], time.Now().Add(time.Duration(d))}
			}
			if err != nil { // EOF, a reset, or closed by Close
				return
			}
		}
	})
	for c := range queue {
		time.Sleep(time.Until(c.due))
		if extra != nil { // server to client: a reply, counted before the client can read it
			seen()
		}
		if _, err := dst.Write(c.data); err != nil {
			_ = src.Close() // unblock the reader
			for range queue {
			}
			break
		}
	}
	wg.Wait()
}
