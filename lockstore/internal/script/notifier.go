package script

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/redis/go-redis/v9"
)

// notifier hands each release notification to the waiter it names. On a
// single Redis (or Sentinel's master) all waiters of a store share one
// SUBSCRIBE connection, the scripts PUBLISH. On a Redis Cluster a classic
// PUBLISH goes to every node, so the scripts SPUBLISH (sharded pub/sub,
// Redis 7) and a key's notifications stay on the shard that owns its slot;
// the notifier SSUBSCRIBEs there, with one connection per hash slot that
// has waiters, because go-redis reconnects a sharded subscription to the
// owner of its first channel's slot: with one slot per connection, a
// connection follows its slot when the slot moves or its shard fails over.
//
// A notification can still be missed: on a single Redis, a release that
// lands before the subscription does (on a Cluster listen waits for the
// confirmation); a shard that failed over (go-redis reconnects to the new
// owner once the slot map names it, which the store's reload hook hastens);
// a slot that moved (the old owner ends our subscription, and the notifier
// subscribes again where the slot lives now); a subscription sent by a
// stale slot map to the old owner (refused: no confirmation comes, and the
// notifier replaces the connection). None of that costs more than latency:
// a waiter retries at least every waitRefresh (wait above).
//
// Subscriptions are per key, made by the first waiter on the key and
// dropped by the last.
type Notifier struct {
	client  redis.UniversalClient
	Sharded bool // SSUBSCRIBE per slot (Cluster), else one SUBSCRIBE connection

	subMu sync.Mutex // serializes (S)SUBSCRIBE/(S)UNSUBSCRIBE with the map changes
	mu    sync.Mutex // guards conns and waiters, also for the dispatchers
	// conns: slot → its pub/sub connection and how many channels it holds;
	// the one connection of an unsharded notifier sits at slot -1.
	conns map[int]*subConn
	// waiters: channel → waiter id → how to wake it.
	waiters map[string]map[string]listener
	closed  bool
}

// listener is one waiter's wake-up (buffered, never blocks) and, for a
// waiter that takes them (ListenTold), where a message's "you are first,
// the lease is ms long" goes.
type listener struct {
	wake   chan struct{}
	told   *atomic.Int64
	digest string // the waiter's own token's: a lease of it is no wait
}

// A message on a key's channel names the waiter it is for: "<id>" (the
// key may be free for it: try), or "<id>><ms>><digest>" from the grant
// that made it the first waiter (the new lease, of the token of digest, is
// ms long). A waiter that listens with told gets ms stored there, so that
// it sleeps until that lease runs out (or it is told again) without a
// try to learn it; 0, which asks for a try, for a plain "<id>" and for a
// lease of its own token (a twin request's, which it renews at once). One
// without told just wakes and tries. "*" is for every waiter (a release
// with nobody queued, for Redlock's). A grant tells only tickets that say
// their gateway reads it ("<gateway>.~<id>", rooms.ticket); a gateway of
// an earlier version gets the plain "<id>" its waiters try on.
func Turn(payload string) (id string, ms int64, holder string) {
	id, rest, found := strings.Cut(payload, ">")
	if !found {
		return payload, 0, ""
	}
	length, holder, _ := strings.Cut(rest, ">")
	ms, err := strconv.ParseInt(length, 10, 64)
	if err != nil || ms <= 0 {
		return id, 0, ""
	}
	return id, ms, holder
}

type subConn struct {
	ps       *redis.PubSub
	channels int
	// confirms: channel → closed when the server confirms our SSUBSCRIBE
	// to it (sharded only). A subscription routed to a node that does not
	// own the slot any more (the client's slot map is stale) is refused
	// with MOVED, which go-redis drops without a word: only a missing
	// confirmation tells.
	confirms map[string]chan struct{}
}

// confirmWait is how long a sharded subscription may take to be confirmed
// before its connection is taken for one to the wrong node and replaced.
const confirmWait = 500 * time.Millisecond

func NewNotifier(client redis.UniversalClient) *Notifier {
	_, sharded := client.(*redis.ClusterClient)
	return &Notifier{
		client:  client,
		Sharded: sharded,
		conns:   make(map[int]*subConn),
		waiters: make(map[string]map[string]listener),
	}
}

// slot is the connection ch is subscribed on.
func (n *Notifier) slot(ch string) int {
	if !n.Sharded {
		return -1
	}
	return ClusterSlot(ch)
}

// listen makes wake (buffered) receive when a message on ch names id, or
// is "*": a release with nobody queued, for waiters without a queue.
func (n *Notifier) Listen(ctx context.Context, ch, id string, wake chan struct{}) error {
	return n.ListenTold(ctx, ch, id, wake, nil, "")
}

// ListenTold is Listen for a waiter that takes a grant's "you are first,
// the lease is ms long" in told (Turn); digest is its token's.
func (n *Notifier) ListenTold(ctx context.Context, ch, id string, wake chan struct{}, told *atomic.Int64, digest string) error {
	n.subMu.Lock()
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		n.subMu.Unlock()
		return RedisErr(redis.ErrClosed)
	}
	ws, subscribed := n.waiters[ch]
	if !subscribed {
		ws = make(map[string]listener)
		n.waiters[ch] = ws
	}
	ws[id] = listener{wake: wake, told: told, digest: digest}
	n.mu.Unlock()
	if subscribed {
		n.subMu.Unlock()
		return nil
	}
	c, confirmed, err := n.subscribe(ctx, ch)
	if err != nil {
		n.mu.Lock()
		delete(n.waiters, ch)
		n.mu.Unlock()
	}
	n.subMu.Unlock()
	if err != nil {
		return RedisErr(err)
	}
	if confirmed == nil {
		return nil
	}
	// Sharded: wait for the confirmation (about a round trip), so that the
	// subscription is in place before the caller queues. Without one, the
	// connection went to a node that no longer owns the slot: replace it;
	// the caller's polling covers the meantime.
	select {
	case <-confirmed:
	case <-time.After(confirmWait):
		go n.resubscribe(n.slot(ch), c)
	case <-ctx.Done():
	}
	return nil
}

// subscribe subscribes to ch on its slot's connection, making the
// connection if it is the slot's first channel, and returns the connection
// and, when sharded, what is closed when the server confirms. Called with
// subMu held.
func (n *Notifier) subscribe(ctx context.Context, ch string) (*subConn, chan struct{}, error) {
	slot := n.slot(ch)
	var confirmed chan struct{}
	if n.Sharded {
		confirmed = make(chan struct{})
	}
	n.mu.Lock()
	c := n.conns[slot]
	if c != nil && confirmed != nil {
		c.confirms[ch] = confirmed // before the confirmation can arrive
	}
	n.mu.Unlock()
	if c != nil {
		var err error
		if n.Sharded {
			err = c.ps.SSubscribe(ctx, ch)
		} else {
			err = c.ps.Subscribe(ctx, ch)
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		if err != nil {
			delete(c.confirms, ch)
			return nil, nil, err
		}
		c.channels++
		return c, confirmed, nil
	}
	// A new connection is made by its first subscribe, which is what
	// routes a sharded one to the slot's owner; its dispatcher starts only
	// after, or it would open the connection first, on a random node.
	// (The confirmation waits in the connection until then.)
	var ps *redis.PubSub
	var err error
	if n.Sharded {
		ps = n.client.SSubscribe(context.Background())
		err = ps.SSubscribe(ctx, ch)
	} else {
		ps = n.client.Subscribe(context.Background())
		err = ps.Subscribe(ctx, ch)
	}
	if err != nil {
		_ = ps.Close()
		return nil, nil, err
	}
	c = &subConn{ps: ps, channels: 1, confirms: make(map[string]chan struct{})}
	if confirmed != nil {
		c.confirms[ch] = confirmed
	}
	n.mu.Lock()
	n.conns[slot] = c
	n.mu.Unlock()
	go n.dispatch(c)
	return c, confirmed, nil
}

// stop forgets a waiter, unsubscribing from ch when it was the last, and
// closing a Cluster slot's connection with its last channel.
func (n *Notifier) Stop(ch, id string) {
	n.subMu.Lock()
	defer n.subMu.Unlock()
	n.mu.Lock()
	ws := n.waiters[ch]
	delete(ws, id)
	last := len(ws) == 0
	if last {
		delete(n.waiters, ch)
	}
	slot := n.slot(ch)
	c := n.conns[slot]
	var drop bool
	if last && c != nil {
		c.channels--
		drop = n.Sharded && c.channels <= 0
		if drop {
			delete(n.conns, slot)
		}
	}
	n.mu.Unlock()
	switch {
	case !last || c == nil:
	case drop:
		_ = c.ps.Close()
	default:
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if n.Sharded {
			_ = c.ps.SUnsubscribe(ctx, ch)
		} else {
			_ = c.ps.Unsubscribe(ctx, ch)
		}
	}
}

func (n *Notifier) dispatch(c *subConn) {
	for msg := range c.ps.ChannelWithSubscriptions() {
		switch msg := msg.(type) {
		case *redis.Message:
			n.mu.Lock()
			named, ms, holder := Turn(msg.Payload)
			for id, l := range n.waiters[msg.Channel] {
				// A watcher (watch.go) hears every message.
				if msg.Payload == "*" || named == id || strings.HasPrefix(id, lockstore.WatchPrefix) {
					if l.told != nil && named == id {
						if holder == l.digest {
							ms = 0
						}
						l.told.Store(ms) // before the wake-up, which reads it
					}
					select {
					case l.wake <- struct{}{}:
					default: // already woken
					}
				}
			}
			n.mu.Unlock()
		case *redis.Subscription:
			// A shard that no longer owns the slot (it moved, or the
			// shard's master became a replica) ends the subscriptions
			// itself. Ours, if a waiter still listens: subscribe again
			// where the slot lives now.
			if msg.Kind == "ssubscribe" {
				n.mu.Lock()
				if confirmed := c.confirms[msg.Channel]; confirmed != nil {
					close(confirmed)
					delete(c.confirms, msg.Channel)
				}
				n.mu.Unlock()
				continue
			}
			slot := n.slot(msg.Channel)
			n.mu.Lock()
			lost := msg.Kind == "sunsubscribe" && len(n.waiters[msg.Channel]) > 0 && n.conns[slot] == c
			n.mu.Unlock()
			if lost {
				go n.resubscribe(slot, c)
			}
		}
	}
}

// resubscribe replaces a slot's connection that its shard dropped, or
// whose subscription went unconfirmed, with one to the slot's owner now,
// for every channel that still has waiters. The client may still believe
// the old owner holds the slot (the new map reaches the nodes by gossip):
// a subscription not confirmed within confirmWait was routed there and
// refused, so it tries again, a few times, with the slot map reloaded.
// Giving up leaves the waiters to their polling.
func (n *Notifier) resubscribe(slot int, old *subConn) {
	for try := range 8 {
		if cc, ok := n.client.(*redis.ClusterClient); ok {
			// go-redis reloads the map in the background, in a few ms.
			cc.ReloadState(context.Background())
			time.Sleep(time.Duration(50*(try+1)) * time.Millisecond)
		}
		c, confirms, ok := n.replace(slot, old)
		if !ok || c == nil {
			return // replaced already, dropped, or nobody waits any more
		}
		deadline := time.After(confirmWait)
		all := true
		for _, confirmed := range confirms {
			select {
			case <-confirmed:
				continue
			case <-deadline:
			}
			all = false
			break
		}
		if all {
			return
		}
		old = c
	}
}

// replace closes a slot's connection old and subscribes the slot's
// channels that have waiters on a new one, which it returns (nil: no
// channel left) with what each confirmation closes. ok is false when old
// is no longer the slot's connection.
func (n *Notifier) replace(slot int, old *subConn) (c *subConn, confirms []chan struct{}, ok bool) {
	n.subMu.Lock()
	defer n.subMu.Unlock()
	n.mu.Lock()
	if n.closed || n.conns[slot] != old {
		n.mu.Unlock()
		return nil, nil, false
	}
	delete(n.conns, slot)
	var channels []string
	for ch, ws := range n.waiters {
		if len(ws) > 0 && n.slot(ch) == slot {
			channels = append(channels, ch)
		}
	}
	n.mu.Unlock()
	_ = old.ps.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, ch := range channels {
		nc, confirmed, err := n.subscribe(ctx, ch)
		if err != nil {
			break // the slot's shard does not answer: polling it is
		}
		c = nc
		if confirmed != nil {
			confirms = append(confirms, confirmed)
		}
	}
	return c, confirms, true
}

func (n *Notifier) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	for slot, c := range n.conns {
		_ = c.ps.Close()
		delete(n.conns, slot)
	}
}
