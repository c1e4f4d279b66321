package lockstore

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/lockgateway/lockgateway/internal/sleep"
)

// Watching: a Hub tells any number of watchers of a key when its state
// changes, at the cost of one watcher. Per watched key and gateway it runs
// one goroutine that reads the state (Kind.Inspect) when the backend
// signals that the key may have changed, when the state ends by itself
// (a lease's expiry: nobody announces it), and every Kind.Poll as a safety
// net for a lost signal (or, without signals, as the only source). Each
// watcher holds one slot, the newest update: a slow watcher skips states,
// but never sees them out of order, and costs bounded memory however far
// behind it falls.
//
// The Hub is generic over the state so other kinds of keys (semaphores)
// plug in with a Kind of their own: their inspect function and their
// store's signal.

// Signaler is a Store that can tell when a key may have changed, through
// any gateway on the same backend: Memory in process, Redis by pub/sub on
// the key's channel (the scripts publish grants, extends and releases),
// Redlock by the same on every node. Expiries are not signalled.
type Signaler interface {
	// Signal makes wake (buffered; a send never blocks) receive whenever
	// key may have changed, until stop is called.
	Signal(ctx context.Context, key string, wake chan struct{}) (stop func(), err error)
}

// WatchPrefix marks a notifier registration that receives every message on
// its channel (notifier.dispatch), where a waiter receives only its own.
// Waiter ids (tickets, "<gateway>.<id>" in base64url) never contain ":".
// Payloads the scripts publish for watchers start with "!", so they never
// name a waiter or equal "*".
const WatchPrefix = "watch:"

// Source tells a Hub how to read and follow one kind of key (locks,
// semaphores).
type Source[S any] struct {
	// Inspect reads key's state; a free key is a state, not an error.
	Inspect func(ctx context.Context, key string) (S, error)
	// Same reports whether two reads show the same state: an update is
	// published only when they do not.
	Same func(a, b S) bool
	// Ends is when s ends by itself (a lease's expiry), zero for never:
	// the hub reads the key again then.
	Ends func(s S) time.Time
	// Signal, when not nil, is the backend's change signal (Signaler).
	Signal func(ctx context.Context, key string, wake chan struct{}) (stop func(), err error)
	// Poll is how often the key is read whatever the signal says: the
	// only source without one, a safety net for a lost one with one.
	Poll time.Duration
	// Timeout bounds one Inspect.
	Timeout time.Duration
}

// Update is one state of a watched key, as the hub read it.
type Update[S any] struct {
	// Seq increases with every update of the key on this hub.
	Seq   uint64
	State S
	// At is when the read that found State started.
	At time.Time
	// Err is set when the last read failed; State is then the last one
	// read (the zero S if none was).
	Err error
}

// Hub fans the state of watched keys out to their watchers.
type Hub[S any] struct {
	kind   Source[S]
	mu     sync.Mutex
	topics map[string]*topic[S]
}

// NewHub returns a Hub for keys of kind k.
func NewHub[S any](k Source[S]) *Hub[S] {
	if k.Poll <= 0 {
		k.Poll = time.Second
	}
	if k.Timeout <= 0 {
		k.Timeout = time.Second
	}
	return &Hub[S]{kind: k, topics: make(map[string]*topic[S])}
}

type topic[S any] struct {
	key    string
	cancel context.CancelFunc
	mu     sync.Mutex
	last   Update[S] // Seq 0: nothing read yet
	subs   map[*Watch[S]]struct{}
}

// Watch is one watcher of a key. Read Ready, then Latest.
type Watch[S any] struct {
	hub    *Hub[S]
	t      *topic[S]
	ready  chan struct{}
	mu     sync.Mutex
	latest Update[S]
	fresh  bool
	closed bool
}

// Watch starts watching key; Close it when done. The current state
// arrives like any update, at once when the hub already knows it.
func (h *Hub[S]) Watch(key string) *Watch[S] {
	w := &Watch[S]{hub: h, ready: make(chan struct{}, 1)}
	h.mu.Lock()
	t := h.topics[key]
	if t == nil {
		ctx, cancel := context.WithCancel(context.Background())
		t = &topic[S]{key: key, cancel: cancel, subs: make(map[*Watch[S]]struct{})}
		h.topics[key] = t
		go h.run(ctx, t)
	}
	t.mu.Lock()
	t.subs[w] = struct{}{}
	if t.last.Seq > 0 {
		w.put(t.last)
	}
	t.mu.Unlock()
	w.t = t
	h.mu.Unlock()
	return w
}

// Watchers reports how many keys are watched, and by how many watchers.
func (h *Hub[S]) Watchers() (keys, watchers int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range h.topics {
		t.mu.Lock()
		watchers += len(t.subs)
		t.mu.Unlock()
	}
	return len(h.topics), watchers
}

// Ready receives when an update is waiting in Latest.
func (w *Watch[S]) Ready() <-chan struct{} { return w.ready }

// Latest takes the newest update; ok is false when none arrived since the
// last call.
func (w *Watch[S]) Latest() (u Update[S], ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	u, ok = w.latest, w.fresh
	w.fresh = false
	return u, ok
}

// put replaces the watcher's slot with u: one slot, whatever the backlog.
func (w *Watch[S]) put(u Update[S]) {
	w.mu.Lock()
	if w.closed || u.Seq <= w.latest.Seq {
		w.mu.Unlock()
		return
	}
	w.latest, w.fresh = u, true
	w.mu.Unlock()
	select {
	case w.ready <- struct{}{}:
	default: // already told
	}
}

// Close stops the watch; the key's goroutine and its signal end with the
// last watcher.
func (w *Watch[S]) Close() {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	t := w.t
	t.mu.Lock()
	delete(t.subs, w)
	last := len(t.subs) == 0
	t.mu.Unlock()
	if last {
		delete(h.topics, t.key)
		t.cancel()
	}
}

// run is a watched key's one goroutine.
func (h *Hub[S]) run(ctx context.Context, t *topic[S]) {
	k := h.kind
	wake := make(chan struct{}, 1)
	var stop func()
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	var seq uint64
	var last Update[S] // the last update published
	var read S         // the last state read
	failing := false
	for {
		// Subscribe before reading, so a change between the two is not
		// missed; a backend that refuses is tried again at the next read.
		if k.Signal != nil && stop == nil {
			if s, err := k.Signal(ctx, t.key, wake); err == nil {
				stop = s
			}
		}
		at := time.Now()
		rctx, cancel := context.WithTimeout(ctx, k.Timeout)
		s, err := k.Inspect(rctx, t.key)
		cancel()
		if ctx.Err() != nil {
			return
		}
		next := k.Poll
		switch {
		case err != nil:
			if !failing || seq == 0 {
				seq++
				last = Update[S]{Seq: seq, State: read, At: at, Err: err}
				t.publish(last)
			}
			failing = true
			next = min(next, time.Second)
		case failing || seq == 0 || !k.Same(last.State, s):
			// Against the state published, not the last read: Same is
			// not transitive. A read in the middle of a Redlock extend
			// finds nodes on either side of it, close enough to the
			// state before and to the state after; compared link by
			// link, the extend would never show.
			failing = false
			seq++
			last = Update[S]{Seq: seq, State: s, At: at}
			t.publish(last)
		}
		if err == nil {
			read = s
		}
		if err == nil && k.Ends != nil {
			if end := k.Ends(s); !end.IsZero() {
				// A few ms past the end, so the read finds it over.
				next = min(next, max(time.Until(end)+5*time.Millisecond, 10*time.Millisecond))
			}
		}
		if stop == nil && k.Signal != nil {
			next = min(next, time.Second)
		}
		if _, ok := sleep.Until(ctx, next, wake); !ok {
			return
		}
	}
}

func (t *topic[S]) publish(u Update[S]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last = u
	for w := range t.subs {
		w.put(u)
	}
}

// LockState is a lock as a watcher sees it.
type LockState struct {
	Held  bool
	Lease Lease // when Held: Inspect's lease, never with a token
	// Slack is how far past Lease.ExpiresAt the lease may still end, as
	// far as this read can tell: the read's round trip and, on Redlock,
	// the spread between the nodes' expiries and the drift allowance
	// (watchLate). The read places every node's expiry it saw in
	// [ExpiresAt, ExpiresAt+Slack].
	Slack time.Duration
}

// Tag names the state for an HTTP entity tag: the fence names the grant
// (fences are unique per key, and a grant's holder never changes), "free"
// a free key. An extend does not change it; a new holder does.
func (s LockState) Tag() string {
	if !s.Held {
		return "free"
	}
	return "fence-" + strconv.FormatInt(s.Lease.Fence, 10)
}

// SameLock: the same holder (fence) with the same expiry, within what the
// two reads could not tell apart. A watcher's "extended" is !SameLock of
// one grant, so this must hold whenever nobody extended between a and b.
//
// Why the expiries' windows overlap then: each read places the expiry of
// every node it counted in [ExpiresAt, ExpiresAt+Slack]. A node's expiry
// changes only when the holder acquires again (a renewal) or extends, so
// without one, a node counted by both reads expires at one moment, in
// both windows. There is such a node: each read counted a majority of
// the nodes holding the grant (one node on Redis), and two majorities
// share a node. Which nodes a read counts varies (a node expires, or
// answers late), so a Redlock read just past the first node's expiry
// finds the grant ending later on the others: that is the spread Slack
// covers, never an extend (TestLockHubRedlockNodesExpireApart).
func SameLock(a, b LockState) bool {
	if a.Held != b.Held {
		return false
	}
	if !a.Held {
		return true
	}
	if a.Lease.Fence != b.Lease.Fence {
		return false
	}
	d := b.Lease.ExpiresAt.Sub(a.Lease.ExpiresAt)
	// PTTL and PEXPIRE are in whole milliseconds: 2 ms more.
	return d <= a.Slack+2*time.Millisecond && -d <= b.Slack+2*time.Millisecond
}

// Poll intervals of the lock hub: the backend's signal carries changes at
// once, so the poll is only the safety net for a lost message (a Redis
// subscription that was re-established); a Spreader's nodes (Redlock's)
// signal too, but a majority read every half second is what the watch
// promises there.
const (
	watchPollSignalled = 2 * time.Second
	watchPollSpread    = 500 * time.Millisecond
)

// Spreader is a store whose nodes let one lease go at moments apart
// (Redlock: each node by its own clock, each a little after the
// conservative ExpiresAt). A watch needs how far apart to tell that spread
// from an extend, and polls a majority read more often than a store whose
// one node signals every change.
type Spreader interface {
	// InspectSpread is Inspect, and how much later than the lease's
	// ExpiresAt its last node may let it go, as this read saw them.
	InspectSpread(ctx context.Context, key string) (Lease, time.Duration, error)
	// SemInspectSpread is SemInspect, and the same for its permits (the
	// largest over them).
	SemInspectSpread(ctx context.Context, key string) (SemaphoreState, time.Duration, error)
	// EndSpread is how much later than ExpiresAt a lease or permit granted
	// for ttl may still be found held.
	EndSpread(ttl time.Duration) time.Duration
}

// NewLockHub returns a Hub watching locks in store, reading each with
// Inspect bounded by timeout.
func NewLockHub(store Store, timeout time.Duration) *Hub[LockState] {
	spread, _ := store.(Spreader)
	k := Source[LockState]{
		Inspect: func(ctx context.Context, key string) (LockState, error) {
			l, held, slack, err := watchRead(ctx, key, spread, store.Inspect, Spreader.InspectSpread)
			if !held {
				return LockState{}, err
			}
			return LockState{Held: true, Lease: l, Slack: slack}, nil
		},
		Same: SameLock,
		Ends: func(s LockState) time.Time {
			if !s.Held {
				return time.Time{}
			}
			return watchEnd(spread, s.Lease.ExpiresAt, s.Lease.Granted)
		},
		Timeout: timeout,
	}
	if s, ok := store.(Signaler); ok {
		k.Signal = s.Signal
	}
	return newWatchHub(k, spread)
}

// watchRead reads key for a hub: through spreadRead when the store is a
// Spreader (spread not nil), else through read. held is false when the key
// is free (ErrNotHeld, then err is nil) or the read failed (err); slack is
// how far past ExpiresAt what it read may still end: the read's own time,
// and the spread of the store's nodes.
func watchRead[V any](ctx context.Context, key string, spread Spreader,
	read func(context.Context, string) (V, error),
	spreadRead func(Spreader, context.Context, string) (V, time.Duration, error),
) (v V, held bool, slack time.Duration, err error) {
	start := time.Now()
	var late time.Duration
	if spread != nil {
		v, late, err = spreadRead(spread, ctx, key)
	} else {
		v, err = read(ctx, key)
	}
	if errors.Is(err, ErrNotHeld) {
		return v, false, 0, nil
	}
	return v, err == nil, time.Since(start) + late, err
}

// watchEnd is when a lease or permit granted for granted may last be found
// held: at expires, or, on a Spreader (spread not nil), up to EndSpread
// later. ExpiresAt is conservative: the nodes let the lease go up to that
// much later, and a read in between would find it still held.
func watchEnd(spread Spreader, expires time.Time, granted time.Duration) time.Time {
	if spread == nil {
		return expires
	}
	return expires.Add(spread.EndSpread(granted))
}

// newWatchHub is the Hub of k, which polls as often as its store needs
// (watchPollSignalled, watchPollSpread).
func newWatchHub[S any](k Source[S], spread Spreader) *Hub[S] {
	k.Poll = watchPollSignalled
	if spread != nil {
		k.Poll = watchPollSpread
	}
	return NewHub(k)
}
