package handlers

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/problem"
)

// Listing bounds.
const (
	// DefaultListLimit is a page's size when the request names none.
	DefaultListLimit = 100
	// MaxListLimit is the largest page a request may ask for.
	MaxListLimit = lockstore.MaxListLimit
	// listsAtOnce bounds the listings a gateway runs at once: each is a
	// pass over every key the backend holds (lockstore.Lister), so a
	// burst of them, a dashboard left open in many tabs included, waits
	// its turn rather than multiplying the load on Redis.
	listsAtOnce = 2
	// listTimeouts is a listing's deadline in backend timeouts: one pass
	// over a large keyspace is many backend calls.
	listTimeouts = 10
)

// Listings serves the listings: GET /locks (and, on stores with
// semaphores, GET /semaphores). They share one bound on the listings a
// gateway runs at once. Build it with NewListings.
type Listings struct {
	locks   lockstore.Lister
	timeout time.Duration
	log     zerolog.Logger
	turns   chan struct{}
	open    *openHolds // nil: no lease is marked held by a stream
}

// NewListings returns the listings over locks, each within listTimeouts
// backend timeouts.
func NewListings(locks lockstore.Lister, backendTimeout time.Duration, log zerolog.Logger) *Listings {
	return &Listings{locks: locks, timeout: listTimeouts * backendTimeout, log: log, turns: make(chan struct{}, listsAtOnce)}
}

// MarkingHolds makes the listings mark each lease that a hold's stream
// on locks' gateway keeps (held_by_stream): the gateway that answers a
// listing knows its own holds only.
func (l *Listings) MarkingHolds(locks *Locks) *Listings {
	l.open = locks.open
	return l
}

// run parses the query, waits for a turn and calls list within the
// listing's deadline; list writes the page, run any error.
func (l *Listings) run(w http.ResponseWriter, r *http.Request, list func(ctx context.Context, q lockstore.ListQuery) error) {
	q, err := ParseListQuery(r.URL.RawQuery)
	if err != nil {
		WriteError(w, r, l.log, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), l.timeout)
	defer cancel()
	select {
	case l.turns <- struct{}{}:
		defer func() { <-l.turns }()
	case <-ctx.Done():
		WriteError(w, r, l.log, listUnavailable(ctx.Err()))
		return
	}
	if err := list(ctx, q); err != nil {
		WriteError(w, r, l.log, listUnavailable(err))
	}
}

// Locks serves GET /locks?prefix=&limit=&cursor=: held locks whose keys
// start with prefix, in key order, a page at a time; never a token.
func (l *Listings) Locks() http.Handler {
	type item struct {
		// as GET /locks/{key} shows the lock
		inspectBody
		Waiters      int  `json:"waiters"`
		HeldByStream bool `json:"held_by_stream"`
	}
	type response struct {
		Items []item `json:"items"`
		Next  string `json:"next,omitempty"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.run(w, r, func(ctx context.Context, q lockstore.ListQuery) error {
			p, err := l.locks.List(ctx, q)
			if err != nil {
				return err
			}
			body := response{Items: make([]item, len(p.Items)), Next: nextCursor(p.Next)}
			for i, it := range p.Items {
				body.Items[i] = item{inspectBody{
					Key: it.Key, Owner: it.Owner, Fence: it.Fence, TTLms: it.Left.Milliseconds(),
					ExpiresAt: timestamp(it.ExpiresAt),
				}, it.Waiters, l.open.has(false, it.Key, it.Fence)}
			}
			encode(w, http.StatusOK, "application/json", body)
			return nil
		})
	})
}

// Semaphores serves GET /semaphores?prefix=&limit=&cursor=: semaphores
// with permits held whose keys start with prefix, in key order, each as
// GET /semaphores/{key} shows it plus its waiters; never a token.
func (l *Listings) Semaphores(sems lockstore.SemLister) http.Handler {
	type holder struct {
		semHolder
		HeldByStream bool `json:"held_by_stream"`
	}
	type item struct {
		// as GET /semaphores/{key} shows the semaphore, each holder marked
		Key     string   `json:"key"`
		Limit   int      `json:"limit"`
		Held    int      `json:"held"`
		Holders []holder `json:"holders"`
		Waiters int      `json:"waiters"`
	}
	type response struct {
		Items []item `json:"items"`
		Next  string `json:"next,omitempty"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.run(w, r, func(ctx context.Context, q lockstore.ListQuery) error {
			p, err := sems.ListSemaphores(ctx, q)
			if err != nil {
				return err
			}
			body := response{Items: make([]item, len(p.Items)), Next: nextCursor(p.Next)}
			for i, it := range p.Items {
				hs := make([]holder, len(it.Holders))
				for j, h := range it.Holders {
					hs[j] = holder{semHolder{Owner: h.Owner, Fence: h.Fence, TTLms: h.Left.Milliseconds(), ExpiresAt: timestamp(h.ExpiresAt)},
						l.open.has(true, it.Key, h.Fence)}
				}
				body.Items[i] = item{Key: it.Key, Limit: it.Limit, Held: len(hs), Holders: hs, Waiters: it.Waiters}
			}
			encode(w, http.StatusOK, "application/json", body)
			return nil
		})
	})
}

// nextCursor is a page's next as the client sees it: "" on the last page.
func nextCursor(after string) string {
	if after == "" {
		return ""
	}
	return encodeCursor(after)
}

// listUnavailable words a listing's failure for a listing: the domain
// table's details speak of retrying a lock operation with its token.
func listUnavailable(err error) error {
	e := fromDomain(err)
	if e == nil || e.Kind != problem.Unavailable {
		return err
	}
	if _, quorum := errors.AsType[quorumError](err); !quorum {
		e.Detail = "the lock backend did not answer the listing in time (a listing reads every key it holds); retry, or list a narrower prefix"
	}
	return e
}

// ParseListQuery reads a listing's query string strictly: prefix (the key
// rules, and it may end in "/"; empty lists every key), limit (1 to
// MaxListLimit, DefaultListLimit when absent) and cursor (a next from an
// earlier page of the same prefix). Any other parameter, or one given
// twice, is a 400: a misspelt prefix must not list everything.
func ParseListQuery(rawQuery string) (lockstore.ListQuery, error) {
	values, err := url.ParseQuery(rawQuery)
	if err != nil {
		return lockstore.ListQuery{}, newError(problem.Malformed, "the query string is malformed; percent-encode the prefix")
	}
	q := lockstore.ListQuery{Limit: DefaultListLimit}
	for name, vs := range values {
		if len(vs) > 1 {
			return q, newError(problem.Malformed, "the query parameter "+strconv.Quote(limitText(name))+" is given more than once; give it once")
		}
		switch name {
		case "prefix", "limit", "cursor":
		default:
			return q, newError(problem.Malformed, "unknown query parameter "+strconv.Quote(limitText(name))+"; a listing takes prefix, limit and cursor")
		}
	}
	q.Prefix = values.Get("prefix")
	if q.Prefix != "" {
		if err := CheckKeyPrefix(q.Prefix); err != nil {
			return q, newError(problem.Malformed, "prefix: "+err.Error())
		}
	}
	if v, ok := values["limit"]; ok {
		n, err := strconv.Atoi(v[0])
		if err != nil {
			return q, newError(problem.Malformed, "limit must be a whole number, as in limit=100")
		}
		if n < 1 || n > MaxListLimit {
			e := newError(problem.Validation, "the request has values out of range; see errors")
			e.Fields = []FieldError{{Field: "limit", Message: "must be from 1 to " + strconv.Itoa(MaxListLimit)}}
			return q, e
		}
		q.Limit = n
	}
	if v, ok := values["cursor"]; ok {
		after, ok := decodeCursor(v[0])
		if !ok || !strings.HasPrefix(after, q.Prefix) {
			return q, newError(problem.Malformed, "cursor is not a next an earlier page of this prefix returned; pass it unchanged, with the same prefix, or start again without a cursor")
		}
		q.After = after
	}
	return q, nil
}

// A cursor is the last key a page covered, opaque to clients (base64url)
// so that none builds on its form: a later version may put more in it.
func encodeCursor(after string) string { return base64.RawURLEncoding.EncodeToString([]byte(after)) }

func decodeCursor(c string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || CheckKey(string(b)) != nil {
		return "", false
	}
	return string(b), true
}

// limitText cuts what a client sent before an error repeats it.
func limitText(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
