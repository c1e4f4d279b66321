// Package ratelimit allows each user one request per window, built on lock
// TTLs: the first request of a user in a window takes the key
// "ratelimit:<user>" for the window; the others are refused until it
// expires.
//
// The check is one atomic round trip to the shared store, so the limit is
// exact across any number of gateway replicas. Each replica also remembers,
// in a bounded cache, until when each user is known to be refused, and
// refuses them again without asking the store: a flood from one user costs
// the store one command per window.
package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
)

// Limiter decides whether a user's request is admitted.
type Limiter struct {
	store   lockstore.Windows
	window  time.Duration
	timeout time.Duration
	cache   *refusals
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
	// Cached is true when the refusal came from the local cache, with no
	// store round trip.
	Cached bool
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
	return &Limiter{store: store, window: window, timeout: opts.Timeout, cache: newRefusals(opts.CacheSize)}, nil
}

// Window is the limiter's window.
func (l *Limiter) Window() time.Duration { return l.window }

// Allow decides on one request of user. It returns an error only when the
// store did not answer; whether to admit then is the caller's policy.
func (l *Limiter) Allow(ctx context.Context, user string) (Decision, error) {
	if user == "" {
		return Decision{}, errors.New("ratelimit: empty user")
	}
	start := time.Now()
	if left := l.cache.refusedFor(user, start); left > 0 {
		return Decision{Reset: left, Cached: true}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	// A fresh id per request, made here: a retried store call is admitted
	// again, and no client can replay an id to slip through.
	left, err := l.store.TakeWindow(ctx, "ratelimit:"+user, newID(), l.window)
	if err != nil {
		return Decision{}, err
	}
	// The store started the window (or measured what is left) after
	// start, so start+d is never later than the real end: the cache can
	// only refuse a request the store would refuse too.
	if left > 0 {
		l.cache.refuseUntil(user, start.Add(left))
		return Decision{Reset: left}, nil
	}
	l.cache.refuseUntil(user, start.Add(l.window))
	return Decision{Allowed: true, Reset: l.window}, nil
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
