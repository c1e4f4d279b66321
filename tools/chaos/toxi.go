package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/rs/zerolog"
)

// Toxi is an embedded toxiproxy server: one Link per gateway and node, so a
// fault can sit between one gateway and one node.
type Toxi struct {
	srv  *toxiproxy.ApiServer
	next atomic.Int64
}

// NewToxi returns an embedded toxiproxy with no API listener: its links are
// driven in-process.
func NewToxi() *Toxi {
	return &Toxi{srv: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())}
}

// Link is one proxy: a gateway connects to Addr instead of its node.
type Link struct {
	p *toxiproxy.Proxy
}

// Link starts a proxy on a free loopback port to upstream (host:port).
func (x *Toxi) Link(t testing.TB, upstream string) *Link {
	t.Helper()
	name := fmt.Sprintf("link%d", x.next.Add(1))
	p := toxiproxy.NewProxy(x.srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("chaos: toxiproxy: %v", err)
	}
	t.Cleanup(p.Stop)
	return &Link{p: p}
}

// Addr is where the gateway should connect.
func (l *Link) Addr() string { return l.p.Listen }

// URL is Addr as a redis:// URL.
func (l *Link) URL() string { return "redis://" + l.Addr() + "/0" }

// add installs a toxic; stream is "upstream" (gateway to node) or
// "downstream" (node to gateway).
func (l *Link) add(name, typ, stream string, attrs any) error {
	body, err := json.Marshal(map[string]any{"name": name, "type": typ, "stream": stream, "toxicity": 1.0, "attributes": attrs})
	if err != nil {
		return err
	}
	_, err = l.p.Toxics.AddToxicJson(bytes.NewReader(body))
	return err
}

// Latency delays every byte by ms ± jitter milliseconds in each direction.
func (l *Link) Latency(ms, jitter int) error {
	if err := l.add("latency_up", "latency", "upstream", map[string]int{"latency": ms, "jitter": jitter}); err != nil {
		return err
	}
	return l.add("latency_down", "latency", "downstream", map[string]int{"latency": ms, "jitter": jitter})
}

// Delay holds everything the gateway sends for ms milliseconds, in order;
// the node's replies are not delayed.
func (l *Link) Delay(ms int) error {
	return l.add("delay_up", "latency", "upstream", map[string]int{"latency": ms})
}

// DelayReplies holds everything the node sends back for ms milliseconds,
// in order; the gateway's requests are not delayed: the node acts at
// once, the gateway learns it late.
func (l *Link) DelayReplies(ms int) error {
	return l.add("delay_down", "latency", "downstream", map[string]int{"latency": ms})
}

// Blackhole drops everything the gateway sends, without closing anything:
// a partition, as the gateway sees it (its calls time out).
func (l *Link) Blackhole() error {
	return l.add("blackhole", "timeout", "upstream", map[string]int{"timeout": 0})
}

// DropReplies lets requests through but drops the node's replies: the node
// acts, the gateway never learns it did.
func (l *Link) DropReplies() error {
	return l.add("drop_replies", "timeout", "downstream", map[string]int{"timeout": 0})
}

// Reset cuts every connection with a TCP reset as soon as it carries data.
func (l *Link) Reset() error {
	return l.add("reset", "reset_peer", "upstream", map[string]int{"timeout": 0})
}

// Clear removes every toxic. Dropped bytes stay dropped, and removing a
// blackhole closes the connections it stalled.
func (l *Link) Clear() {
	for _, tx := range l.p.Toxics.GetToxicArray() {
		_ = l.p.Toxics.RemoveToxic(context.Background(), tx.(*toxics.ToxicWrapper).Name)
	}
}

// OnSend calls fire once, the first time the gateway sends the node a chunk
// containing marker (a lock key appears in clear in every script call), just
// before the chunk goes on to the node. It is how a test stops a gateway in
// the middle of an operation it chooses. The hook is removed after it fired.
func (l *Link) OnSend(marker string, fire func()) error {
	id := fmt.Sprintf("tap%d", tapSeq.Add(1))
	var once sync.Once
	taps.Store(id, func(data []byte) {
		if bytes.Contains(data, []byte(marker)) {
			once.Do(func() {
				taps.Delete(id)
				fire()
			})
		}
	})
	return l.add(id, "chaos_tap", "upstream", map[string]string{"id": id})
}

// RemoveTaps removes the toxics OnSend installed.
func (l *Link) RemoveTaps() {
	for _, tx := range l.p.Toxics.GetToxicArray() {
		if w := tx.(*toxics.ToxicWrapper); strings.HasPrefix(w.Name, "tap") {
			_ = l.p.Toxics.RemoveToxic(context.Background(), w.Name)
			taps.Delete(w.Name)
		}
	}
}

var (
	tapSeq atomic.Int64
	taps   sync.Map // tap id → func([]byte)
)

// tapToxic passes data through unchanged, showing each chunk to the hook
// registered under its id first.
type tapToxic struct {
	ID string `json:"id"`
}

func (t *tapToxic) Pipe(stub *toxics.ToxicStub) {
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			if f, ok := taps.Load(t.ID); ok {
				f.(func([]byte))(c.Data)
			}
			stub.Output <- c
		}
	}
}

func init() {
	toxics.Register("chaos_tap", new(tapToxic))
}
