// Package ratelimit allows each user one request per window, built on lock
// TTLs: the first request of a user in a window takes the key
// "ratelimit:<user>" for the window; the others are refused until it
// expires.
//
// The check is one atomic round trip to the shared store, so the limit is
// exact across any number of gateway replicas. Each replica also remembers,
// in a bounded cache, until when each user is known to be refused, and
// refuses them again without asking the store: a flood from one user costs
// the store one command per window, and so does a burst of concurrent
// requests from one user: while a user's check is on its way to the store,
// the replica's other requests of that user wait for it instead of racing
// it (see Allow).
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockgateway/lockgateway/internal/randid"
	"github.com/lockgateway/lockgateway/lockstore"
)

// Limiter decides whether a user's request is admitted.
type Limiter struct {
	store   lockstore.Windows
	window  time.Duration
	timeout time.Duration
	cache   *refusals

	mu      sync.Mutex
	flights map[string]*flight // the store check in progress, per user
}

// flight is one store check of one user, shared by every request of that
// user that arrives while it is under way.
type flight struct {
	start     time.Time     // before the store call: windows begin no earlier
	followers int           // requests waiting on it besides the leader; under Limiter.mu
	done      chan struct{} // closed when left and err are set
	left      time.Duration
	err       error
}

// Options tune a Limiter; zero values take the defaults.
type Options struct {
	// Timeout bounds one store call, so a slow store cannot stall
	// requests. Default 100ms.
	Timeout time.Duration
	// CacheSize bounds the refusal cache (entries). Default 65536.
	CacheSize int
}

// Decision is a Limiter's answer for one request.
type Decision struct {
	Allowed bool
	// Reset is when the user may be admitted next, from now: the window
	// for an admitted request, the time left for a refused one.
	Reset time.Duration
	// Cached is true when the refusal cost this request no store round
	// trip: it came from the local cache, or from a concurrent request's
	// round trip (Shared).
	Cached bool
	// Shared is true when the decision is a refusal learned from the
	// store check of a concurrent request of the same user (see Allow).
	Shared bool
	// LeaderErr is set on a Shared refusal when that concurrent check
	// failed: the store did not answer for this request either. See Allow
	// for why it is a refusal and not an error; a caller that fails closed
	// may answer it as it answered the failed check (Middleware does).
	LeaderErr error
}

// New returns a Limiter allowing one request per window per user.
func New(store lockstore.Windows, window time.Duration, opts Options) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("ratelimit: nil store")
	}
	if window < lockstore.MinTTL {
		return nil, fmt.Errorf("ratelimit: window %v is below %v", window, lockstore.MinTTL)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 100 * time.Millisecond
	}
	if opts.CacheSize <= 0 {
		opts.CacheSize = 1 << 16
	}
	return &Limiter{store: store, window: window, timeout: opts.Timeout, cache: newRefusals(opts.CacheSize), flights: make(map[string]*flight)}, nil
}

// Window is the limiter's window.
func (l *Limiter) Window() time.Duration { return l.window }

// Allow decides on one request of user. It returns an error only when the
// store did not answer this request's check, or when ctx ended first;
// whether to admit then is the caller's policy.
//
// One user's concurrent requests share one store check. The first, the
// leader, starts it; those arriving while it is under way wait for it and
// are refused (Shared): if the leader was admitted, the window is now
// taken; if it was refused, so are they, until the same time. Without
// this, a single client's burst is a burst of competing store calls for
// one key: over Redlock they split the nodes' votes and retry until they
// run out of time, and a fail-open caller admits every one of them.
//
// When the leader's check fails, its followers are still refused, not
// given its error. A fail-open caller admits the leader, and that
// admission is the window's one: handing the error to the followers
// would have the caller admit them all, turning one slow store call into
// a whole burst of admissions — the very bug this sharing fixes. A
// fail-closed caller refused the leader, so the followers' refusal keeps
// its policy; LeaderErr lets it say why (Middleware answers 503, as it
// did to the leader). Nothing is cached from a failed check: the next
// request after it asks the store again.
//
// The check runs detached from any one request's context, bounded only by
// the Limiter's timeout, so that the leader going away decides nothing
// for its followers; each waiting request, leader included, returns
// ctx.Err() as soon as its own ctx ends.
func (l *Limiter) Allow(ctx context.Context, user string) (Decision, error) {
	if user == "" {
		return Decision{}, errors.New("ratelimit: empty user")
	}
	now := time.Now()
	if left := l.cache.refusedFor(user, now); left > 0 {
		return Decision{Reset: left, Cached: true}, nil
	}
	l.mu.Lock()
	f, follower := l.flights[user]
	if follower {
		f.followers++
	} else {
		f = &flight{start: now, done: make(chan struct{})}
		l.flights[user] = f
		go l.check(context.WithoutCancel(ctx), user, f)
	}
	l.mu.Unlock()

	select {
	case <-f.done:
	case <-ctx.Done():
		return Decision{}, ctx.Err()
	}
	if !follower {
		if f.err != nil {
			return Decision{}, f.err
		}
		if f.left > 0 {
			return Decision{Reset: f.left}, nil
		}
		return Decision{Allowed: true, Reset: l.window}, nil
	}
	// The leader's window (or the one that refused it) ends no later than
	// its start plus what the store said: the same bound the cache keeps.
	end := f.start.Add(l.window)
	if f.err == nil && f.left > 0 {
		end = f.start.Add(f.left)
	}
	return Decision{Reset: max(time.Until(end), time.Millisecond), Cached: true, Shared: true, LeaderErr: f.err}, nil
}

// check runs f's store call and settles f. ctx carries the leader's values
// but not its cancellation.
func (l *Limiter) check(ctx context.Context, user string, f *flight) {
	defer func() {
		if p := recover(); p != nil { // the followers must not wait forever
			f.left, f.err = 0, fmt.Errorf("ratelimit: store panicked: %v", p)
		}
		l.mu.Lock()
		delete(l.flights, user)
		l.mu.Unlock()
		close(f.done)
	}()
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	// A fresh id per check, made here: a retried store call is admitted
	// again, and no client can replay an id to slip through.
	f.left, f.err = l.store.TakeWindow(ctx, "ratelimit:"+user, randid.New(16), l.window)
	if f.err != nil {
		return
	}
	// The store started the window (or measured what is left) after
	// f.start, so f.start+d is never later than the real end: the cache can
	// only refuse a request the store would refuse too. The cache learns
	// it before the flight ends, so no request of the user falls between
	// the two and asks the store again.
	if f.left > 0 {
		l.cache.refuseUntil(user, f.start.Add(f.left))
	} else {
		l.cache.refuseUntil(user, f.start.Add(l.window))
	}
}
