package handlers

import "sync"

// openHolds are the holds whose streams are open on this gateway, by
// key: the listings mark their leases (held_by_stream), and a DELETE
// through this gateway that frees one ends its stream at once. A hold on
// another gateway is not here: the backend does not record which leases
// a stream keeps, so that gateway alone knows.
type openHolds struct {
	mu    sync.Mutex
	byKey map[holdKey][]*openHold
}

// holdKey names a key of one kind: a lock and a semaphore may share a key.
type holdKey struct {
	permit bool
	key    string
}

// openHold is one open hold.
type openHold struct {
	holdKey
	token string
	fence int64
	// released is closed when a DELETE with the token through this
	// gateway freed the lease, or a forced release of its fence did
	// (forced, set before the close).
	released chan struct{}
	closed   bool // released is closed (guarded by openHolds.mu)
	forced   bool
	// wake, when not nil, is called once released is closed: a hold
	// served on its connection (hold_conn.go) waits in a read, not on
	// the channel. Guarded by openHolds.mu.
	wake func()
}

func newOpenHolds() *openHolds { return &openHolds{byKey: make(map[holdKey][]*openHold)} }

// add notes a hold of the lease token holds on key (a permit's when
// permit), granted with fence; remove it when the hold ends.
func (o *openHolds) add(permit bool, key, token string, fence int64) *openHold {
	h := &openHold{holdKey: holdKey{permit, key}, token: token, fence: fence, released: make(chan struct{})}
	o.mu.Lock()
	o.byKey[h.holdKey] = append(o.byKey[h.holdKey], h)
	o.mu.Unlock()
	return h
}

func (o *openHolds) remove(h *openHold) {
	o.mu.Lock()
	defer o.mu.Unlock()
	hs := o.byKey[h.holdKey]
	for i, x := range hs {
		if x == h {
			hs = append(hs[:i], hs[i+1:]...)
			break
		}
	}
	if len(hs) == 0 {
		delete(o.byKey, h.holdKey)
	} else {
		o.byKey[h.holdKey] = hs
	}
}

// released tells the holds of token on key that a DELETE through this
// gateway freed their lease.
func (o *openHolds) released(permit bool, key, token string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, h := range o.byKey[holdKey{permit, key}] {
		if h.token == token && !h.closed {
			h.close()
		}
	}
}

// forced tells the holds of the lease of fence on key that a forced
// release through this gateway freed it.
func (o *openHolds) forced(permit bool, key string, fence int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, h := range o.byKey[holdKey{permit, key}] {
		if h.fence == fence && !h.closed {
			h.forced = true
			h.close()
		}
	}
}

// close closes released (under openHolds.mu) and wakes the hold.
func (h *openHold) close() {
	h.closed = true
	close(h.released)
	if h.wake != nil {
		h.wake()
	}
}

// wakeOn sets the function that wakes h's hold once released is closed.
func (o *openHolds) wakeOn(h *openHold, wake func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	h.wake = wake
}

// freed is the final event and reason of a hold whose lease a request
// through this gateway freed (released is closed): the holder's DELETE,
// or another's forced release.
func (h *openHold) freed() (event, reason string) {
	if h.forced {
		return "lost", holdForced
	}
	return "released", holdReleased
}

// has reports whether a hold on this gateway keeps the lease of fence on
// key (a permit's when permit); never on a nil openHolds.
func (o *openHolds) has(permit bool, key string, fence int64) bool {
	if o == nil {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, h := range o.byKey[holdKey{permit, key}] {
		if h.fence == fence {
			return true
		}
	}
	return false
}
