package handlers

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
)

// Watching a semaphore (GET /semaphores/{key}): as a lock (watch.go), with
// the set of permits as the state. Its ETag is W/"permits-<digest of the
// fences>", W/"free" when none is held; the stream's events are per permit
// (acquired, extended, released, expired), each with the semaphore's GET
// body and the permit concerned as data. Event ids only order the events:
// a reconnect gets the current permits again (as acquired), whatever its
// Last-Event-ID, whose only use is that the ids go on increasing.

// SemHub is the hub semaphores are watched through.
type SemHub = lockstore.Hub[lockstore.SemState]

// Watching makes the semaphore endpoints watch through hub (NewSemaphores
// makes one of its own over its store).
func (h *Semaphores) Watching(hub *SemHub) *Semaphores {
	h.semHub = hub
	return h
}

func semTag(s lockstore.SemState) string { return `W/"` + s.Tag() + `"` }

// semHolder and semBody are what GET shows of a semaphore, never a token.
type semHolder struct {
	Owner     string `json:"owner,omitempty"`
	Fence     int64  `json:"fence"`
	TTLms     int64  `json:"ttl_ms"`
	ExpiresAt string `json:"expires_at"`
}

type semBody struct {
	Key     string      `json:"key"`
	Limit   int         `json:"limit"`
	Held    int         `json:"held"`
	Holders []semHolder `json:"holders"`
}

func newSemHolder(p lockstore.Permit, now time.Time) semHolder {
	return semHolder{Owner: p.Owner, Fence: p.Fence, TTLms: max(p.ExpiresAt.Sub(now), 0).Milliseconds(), ExpiresAt: timestamp(p.ExpiresAt)}
}

func newSemBody(st lockstore.SemaphoreState, now time.Time) semBody {
	out := semBody{Key: st.Key, Limit: st.Limit, Held: len(st.Holders), Holders: make([]semHolder, 0, len(st.Holders))}
	for _, p := range st.Holders {
		out.Holders = append(out.Holders, newSemHolder(p, now))
	}
	return out
}

// writeSem answers as a plain GET would: 200 with the permits, 404 when
// none is held, each with the state's ETag.
func (h *Semaphores) writeSem(w http.ResponseWriter, r *http.Request, s lockstore.SemState) {
	w.Header().Set("ETag", semTag(s))
	if !s.Held() {
		WriteError(w, r, h.log, semError(lockstore.ErrNotHeld))
		return
	}
	encode(w, http.StatusOK, "application/json", newSemBody(s.Sem, time.Now()))
}

// inspect reads key's permits (a free semaphore is a state).
func (h *Semaphores) inspect(ctx context.Context, key string) (lockstore.SemState, error) {
	ctx, cancel := context.WithTimeout(ctx, h.limits.BackendTimeout)
	defer cancel()
	st, err := h.sems.SemInspect(ctx, key)
	if errors.Is(err, lockstore.ErrNotHeld) {
		return lockstore.SemState{Sem: lockstore.SemaphoreState{Key: key}}, nil
	}
	return lockstore.SemState{Sem: st}, err
}

// conditionalSem serves a GET with If-None-Match.
func (h *Semaphores) conditionalSem(w http.ResponseWriter, r *http.Request, key string, tags []string, star bool) {
	wait, err := h.wait(w, r, nil)
	if err != nil {
		WriteError(w, r, h.log, err)
		return
	}
	if wait <= 0 {
		s, err := h.inspect(r.Context(), key)
		switch {
		case err != nil:
			WriteError(w, r, h.log, semError(err))
		case matches(tags, star, s.Held(), s.Tag()):
			notModified(w, semTag(s))
		default:
			h.writeSem(w, r, s)
		}
		return
	}
	awaitChange(w, r, h.watchDeps(), h.semHub, key, wait, watchTag[lockstore.SemState]{
		tag:   semTag,
		match: func(s lockstore.SemState) bool { return matches(tags, star, s.Held(), s.Tag()) },
		write: func(s lockstore.SemState) { h.writeSem(w, r, s) },
	})
}

// semEvent is the data of a semaphore's event: the semaphore after the
// change, and the permit it concerns (for released and expired, as it was).
type semEvent struct {
	semBody
	Permit *semHolder `json:"permit,omitempty"`
}

// streamSem serves GET /semaphores/{key} with Accept: text/event-stream.
func (h *Semaphores) streamSem(w http.ResponseWriter, r *http.Request, key string) {
	var id uint64
	if last, err := strconv.ParseUint(strings.TrimSpace(r.Header.Get("Last-Event-ID")), 10, 64); err == nil {
		id = last
	}
	var known map[int64]lockstore.Permit // by fence; nil before the first state
	var knownSlack time.Duration         // the slack of the reading known came from
	serveEvents(w, r, h.watchDeps(), h.semHub, key, semTag, func(u lockstore.Update[lockstore.SemState]) []sseEvent {
		now := time.Now()
		body := newSemBody(u.State.Sem, now)
		if body.Key == "" {
			body.Key = key
		}
		var events []sseEvent
		emit := func(name string, p lockstore.Permit) {
			id++
			holder := newSemHolder(p, now)
			if name == "released" || name == "expired" {
				holder.TTLms = 0
			}
			events = append(events, sseEvent{name: name, id: id, data: semEvent{semBody: body, Permit: &holder}})
		}
		first := known == nil
		next := make(map[int64]lockstore.Permit, len(u.State.Sem.Holders))
		for _, p := range u.State.Sem.Holders {
			next[p.Fence] = p
		}
		// Ends first, in fence order, then grants and extends in fence
		// order: a watcher's count of holders never passes the limit.
		for _, p := range sortedPermits(known) {
			if _, ok := next[p.Fence]; !ok {
				name := "released"
				if !u.At.Before(p.ExpiresAt) {
					name = "expired"
				}
				emit(name, p)
			}
		}
		for _, p := range u.State.Sem.Holders {
			was, ok := known[p.Fence]
			switch {
			case !ok:
				emit("acquired", p)
			case !lockstore.SameSem(lockstore.SemState{Sem: lockstore.SemaphoreState{Holders: []lockstore.Permit{was}}, Slack: knownSlack},
				lockstore.SemState{Sem: lockstore.SemaphoreState{Holders: []lockstore.Permit{p}}, Slack: u.State.Slack}):
				emit("extended", p)
			}
		}
		if first && len(next) == 0 {
			id++
			events = append(events, sseEvent{name: "released", id: id, data: semEvent{semBody: body}})
		}
		known, knownSlack = next, u.State.Slack
		return events
	})
}

func sortedPermits(m map[int64]lockstore.Permit) []lockstore.Permit {
	out := slices.Collect(maps.Values(m))
	slices.SortFunc(out, func(a, b lockstore.Permit) int { return cmp.Compare(a.Fence, b.Fence) })
	return out
}
