package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/problem"
)

// Watching a lock (GET /locks/{key}, docs/api.md "Watching"):
//
//   - Every GET answers with an ETag naming the state, W/"fence-<fence>"
//     when held, W/"free" when not (also on the 404): never the token.
//   - If-None-Match with Prefer: wait=<seconds> is a long-poll: it answers
//     once the state's tag differs from every tag sent, as a plain GET
//     would, or 304 when the wait runs out.
//   - Accept: text/event-stream is a stream of Server-Sent Events.
//
// Both wait on the gateway's watch hub (lockstore.Hub), so any number of
// watchers of a key cost the backend what one does.
//
// Another kind of key (semaphores) reuses awaitChange and serveEvents
// with a hub over its own state (lockstore.Source: its inspect function and
// its channel), its tag, and its own diff from one state to the next.

// LockHub is the hub locks are watched through.
type LockHub = lockstore.Hub[lockstore.LockState]

// Watching makes the lock endpoints watch through hub, one per gateway
// shared by every watcher (NewLocks makes one of its own over its store).
func (h *Locks) Watching(hub *LockHub) *Locks {
	h.hub = hub
	return h
}

// sseHeartbeat is how often an idle stream gets a comment line, so proxies
// and clients can tell a quiet lock from a dead connection.
const sseHeartbeat = 15 * time.Second

// stateTag is s's entity tag, weak: the body's ttl_ms changes while the
// tag does not.
func stateTag(s lockstore.LockState) string { return `W/"` + s.Tag() + `"` }

// ifNoneMatch reads If-None-Match: the opaque tags it lists (weak or not:
// RFC 9110 compares them weakly), and whether it is "*". ok is false
// without the header.
func ifNoneMatch(r *http.Request) (tags []string, star, ok bool, _ error) {
	values := r.Header.Values("If-None-Match")
	if len(values) == 0 {
		return nil, false, false, nil
	}
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			t = strings.TrimSpace(t)
			switch {
			case t == "":
				continue
			case t == "*":
				star = true
				continue
			}
			t = strings.TrimPrefix(t, "W/")
			if len(t) < 2 || t[0] != '"' || t[len(t)-1] != '"' || len(t) > 64 {
				return nil, false, false, newError(problem.Malformed, `If-None-Match must list entity tags as the ETag of a GET gave them, as in If-None-Match: W/"fence-1795213800123456"`)
			}
			tags = append(tags, t[1:len(t)-1])
		}
	}
	return tags, star, true, nil
}

// matches: a state of a lock or a semaphore, held or not and tagged tag,
// is what the client already has (If-None-Match lists its tag, or "*" and
// it is held).
func matches(tags []string, star, held bool, tag string) bool {
	return star && held || slices.Contains(tags, tag)
}

// inspectBody is what GET shows of a held lock, never the token.
type inspectBody struct {
	Key       string `json:"key"`
	Owner     string `json:"owner,omitempty"`
	Fence     int64  `json:"fence"`
	TTLms     int64  `json:"ttl_ms"`
	ExpiresAt string `json:"expires_at"`
}

func newInspectBody(l lockstore.Lease, left time.Duration) inspectBody {
	return inspectBody{Key: l.Key, Owner: l.Owner, Fence: l.Fence, TTLms: max(left, 0).Milliseconds(), ExpiresAt: timestamp(l.ExpiresAt)}
}

// writeState answers as a plain GET would for state s: 200 with the lock,
// or 404 when free, each with the state's ETag.
func (h *Locks) writeState(w http.ResponseWriter, r *http.Request, key string, s lockstore.LockState, left time.Duration) {
	w.Header().Set("ETag", stateTag(s))
	if !s.Held {
		WriteError(w, r, h.log, lockstore.ErrNotHeld)
		return
	}
	encode(w, http.StatusOK, "application/json", newInspectBody(s.Lease, left))
}

func notModified(w http.ResponseWriter, tag string) {
	if tag != "" {
		w.Header().Set("ETag", tag)
	}
	w.WriteHeader(http.StatusNotModified)
}

// conditional serves a GET with If-None-Match: at once without a wait,
// else a long-poll on the hub.
func (h *Locks) conditional(w http.ResponseWriter, r *http.Request, key string, tags []string, star bool) {
	wait, err := h.wait(w, r, nil)
	if err != nil {
		WriteError(w, r, h.log, err)
		return
	}
	if wait <= 0 {
		ctx, cancel := context.WithTimeout(r.Context(), h.limits.BackendTimeout)
		defer cancel()
		l, err := h.store.Inspect(ctx, key)
		s := lockstore.LockState{Held: err == nil, Lease: l}
		if err != nil && !errors.Is(err, lockstore.ErrNotHeld) {
			WriteError(w, r, h.log, err)
			return
		}
		if matches(tags, star, s.Held, s.Tag()) {
			notModified(w, stateTag(s))
			return
		}
		h.writeState(w, r, key, s, l.Left)
		return
	}

	awaitChange(w, r, h.watchDeps(), h.hub, key, wait, watchTag[lockstore.LockState]{
		tag:   stateTag,
		match: func(s lockstore.LockState) bool { return matches(tags, star, s.Held, s.Tag()) },
		write: func(s lockstore.LockState) { h.writeState(w, r, key, s, time.Until(s.Lease.ExpiresAt)) },
	})
}

// watchDeps is what the generic watch functions need of an endpoint.
type watchDeps struct {
	log      zerolog.Logger
	stopping <-chan struct{}
}

func (h *Locks) watchDeps() watchDeps { return watchDeps{log: h.log, stopping: h.stopping} }

// watchTag is what a long-poll needs of a kind of key's state S (locks
// here; a semaphore's permits plug in the same way): its entity tag, whether
// the client's If-None-Match matches it, and how a plain GET answers it.
type watchTag[S any] struct {
	tag   func(S) string
	match func(S) bool
	write func(S)
}

// awaitChange is the long-poll: it answers with the first state the
// client's If-None-Match does not match, or 304 when wait runs out.
func awaitChange[S any](w http.ResponseWriter, r *http.Request, d watchDeps, hub *lockstore.Hub[S], key string, wait time.Duration, k watchTag[S]) {
	watch := hub.Watch(key)
	defer watch.Close()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	tag := "" // the state last seen, for the 304
	for {
		select {
		case <-watch.Ready():
			u, ok := watch.Latest()
			if !ok {
				continue
			}
			if u.Err != nil {
				WriteError(w, r, d.log, u.Err)
				return
			}
			if !k.match(u.State) {
				k.write(u.State)
				return
			}
			tag = k.tag(u.State)
		case <-timer.C:
			notModified(w, tag)
			return
		case <-d.stopping:
			WriteError(w, r, d.log, errShuttingDown)
			return
		case <-r.Context().Done():
			return
		}
	}
}

// wantsStream: the client asks for Server-Sent Events.
func wantsStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err == nil && mt == "text/event-stream" && params["q"] != "0" {
				return true
			}
		}
	}
	return false
}

// Event ids. An id says what the client has seen: for a grant with fence
// F, acquired is F·1000, its extends F·1000+1 up to +998, and the end of
// the grant (released or expired) F·1000+999; fences increase per key, so
// ids do. An id of 0 says "free, holder unknown". A reconnect's
// Last-Event-ID lets the stream skip what the client already knows: the
// gateway keeps no history to replay, so a reconnect gets the current
// state first, as the event that takes the client from what its id says
// to the present.
const (
	idScale = 1000
	idEnded = idScale - 1
)

// streamView is what the client of a stream knows: whether it knows
// anything, the state it last heard of (for a free state, the grant it
// heard end, fence 0 if none), and the last id sent (or its Last-Event-ID).
type streamView struct {
	known bool
	state lockstore.LockState
	ended lockstore.Lease // when !state.Held: the grant the client heard end
	id    uint64
}

// sseEvent is one event of a stream; noID sends none (the client keeps
// its last).
type sseEvent struct {
	name string
	id   uint64
	noID bool
	data any
}

// endedBody is the data of released and expired: the grant that ended,
// or only the key when the stream opens on a free lock.
type endedBody struct {
	Key   string `json:"key"`
	Owner string `json:"owner,omitempty"`
	Fence int64  `json:"fence,omitempty"`
}

// lastEventID reads Last-Event-ID into a view; a missing or foreign id
// (not ours: not a number) is a client that knows nothing.
func lastEventID(r *http.Request, key string) streamView {
	id, err := strconv.ParseUint(strings.TrimSpace(r.Header.Get("Last-Event-ID")), 10, 64)
	if err != nil {
		return streamView{}
	}
	l := lockstore.Lease{Key: key, Fence: int64(id / idScale)}
	if id%idScale == idEnded || id == 0 {
		return streamView{known: true, ended: l, id: id}
	}
	// The client heard of the grant; not its expiry, so the current one
	// comes as an extend.
	return streamView{known: true, state: lockstore.LockState{Held: true, Lease: l}, id: id}
}

// next returns the events that take the client from v to u's state, and
// the view after them.
func (v streamView) next(key string, u lockstore.Update[lockstore.LockState]) ([]sseEvent, streamView) {
	s := u.State
	var events []sseEvent
	emit := func(name string, id uint64, data any) {
		e := sseEvent{name: name, id: max(id, v.id+1), data: data}
		if e.id/idScale != id/idScale { // out of ids for this grant (998 extends)
			e.noID = true
		} else {
			v.id = e.id
		}
		events = append(events, e)
	}
	ended := func(l lockstore.Lease, at time.Time) {
		// Expired when it ended at or after the lease's (conservative)
		// end as the client knew it; released before that.
		name := "released"
		if !l.ExpiresAt.IsZero() && !at.Before(l.ExpiresAt) {
			name = "expired"
		}
		emit(name, uint64(l.Fence)*idScale+idEnded, endedBody{Key: key, Owner: l.Owner, Fence: l.Fence})
		v.ended = l
	}
	held := func() any { return newInspectBody(s.Lease, time.Until(s.Lease.ExpiresAt)) }
	was := v.state
	switch {
	case !v.known && !s.Held:
		// The stream opens on a free lock: id 0, "free, holder unknown".
		events = append(events, sseEvent{name: "released", id: 0, data: endedBody{Key: key}})
	case !s.Held && was.Held:
		ended(was.Lease, u.At)
	case !s.Held:
		// free, and the client knew it
	case v.known && was.Held && s.Lease.Fence == was.Lease.Fence:
		if !lockstore.SameLock(was, s) {
			emit("extended", uint64(s.Lease.Fence)*idScale+1, held())
		}
	case v.known && (s.Lease.Fence < was.Lease.Fence || !was.Held && s.Lease.Fence <= v.ended.Fence):
		// The client heard of a later grant, or of this one's end, than
		// this reading shows (a reconnect to a gateway whose reading is
		// older): wait for news.
		return nil, v
	default:
		if v.known && was.Held {
			ended(was.Lease, u.At)
		}
		emit("acquired", uint64(s.Lease.Fence)*idScale, held())
	}
	v.known, v.state = true, s
	return events, v
}

// stream serves GET with Accept: text/event-stream.
func (h *Locks) stream(w http.ResponseWriter, r *http.Request, key string) {
	view := lastEventID(r, key)
	serveEvents(w, r, h.watchDeps(), h.hub, key, stateTag, func(u lockstore.Update[lockstore.LockState]) []sseEvent {
		var events []sseEvent
		events, view = view.next(key, u)
		return events
	})
}

// serveEvents is the event stream of a key of any kind: next turns each
// update into the events that take this client to it (none when the
// client already knows it); tag names the first state in the ETag.
func serveEvents[S any](w http.ResponseWriter, r *http.Request, d watchDeps, hub *lockstore.Hub[S], key string,
	tag func(S) string, next func(lockstore.Update[S]) []sseEvent) {
	watch := hub.Watch(key)
	defer watch.Close()
	rc := http.NewResponseController(w)

	// The first reading decides between a stream and a problem: a backend
	// that does not answer is a 503, as for a plain GET.
	var first lockstore.Update[S]
	for got := false; !got; {
		select {
		case <-watch.Ready():
			first, got = watch.Latest()
		case <-d.stopping:
			WriteError(w, r, d.log, errShuttingDown)
			return
		case <-r.Context().Done():
			return
		}
	}
	if first.Err != nil {
		WriteError(w, r, d.log, first.Err)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: pass events on at once
	w.Header().Set("ETag", tag(first.State))
	w.WriteHeader(http.StatusOK)

	// write sends p, pushing the write deadline (the server's is sized
	// for a wait, not a stream) past the next heartbeat.
	write := func(p []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(2 * sseHeartbeat))
		if _, err := w.Write(p); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	send := func(u lockstore.Update[S]) bool {
		var b strings.Builder
		for _, e := range next(u) {
			fmt.Fprintf(&b, "event: %s\n", e.name)
			if !e.noID {
				fmt.Fprintf(&b, "id: %d\n", e.id)
			}
			fmt.Fprintf(&b, "data: %s\n\n", jsonLine(e.data))
		}
		return b.Len() == 0 || write([]byte(b.String()))
	}
	if !send(first) || rc.Flush() != nil { // the headers, if no event went
		return
	}
	heartbeat := time.NewTicker(sseHeartbeat)
	defer heartbeat.Stop()
	failing := false
	for {
		select {
		case <-watch.Ready():
			u, ok := watch.Latest()
			switch {
			case !ok:
			case u.Err != nil:
				if !failing && !write([]byte(": backend unavailable; the stream resumes when it answers\n\n")) {
					return
				}
				failing = true
			default:
				failing = false
				if !send(u) {
					return
				}
			}
		case <-heartbeat.C:
			if !write([]byte(": heartbeat\n\n")) {
				return
			}
		case <-d.stopping:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// jsonLine is v as one line of JSON: an event's data field.
func jsonLine(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("handlers: encode %T: %v", v, err)) // our own types always marshal
	}
	return b
}
