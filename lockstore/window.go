package lockstore

import (
	"context"
	_ "embed"
	"errors"
	"strings"
	"time"
)

// Windows is the primitive behind per-user rate limits: a lease nobody
// releases, whose TTL is the window. TakeWindow takes key for window on
// behalf of request id and returns 0, or, when another request holds the
// window, the time it has left. The same id taking the same window again is
// admitted again, so a retried call never turns an admission into a refusal.
//
// Window keys live apart from lock keys: a client cannot lock a user's
// rate-limit window through /locks.
type Windows interface {
	TakeWindow(ctx context.Context, key, id string, window time.Duration) (time.Duration, error)
}

// windowPrefix keeps windows out of the lock keyspace: lock keys can never
// hold a NUL byte.
const windowPrefix = "\x00window:"

// IsWindowKey reports whether key, as a store's Acquire sees it, is a
// rate-limit window LockWindows took rather than a lock: a store caps and
// lists locks, not windows.
func IsWindowKey(key string) bool { return strings.HasPrefix(key, windowPrefix) }

// LockWindows makes windows out of any Store's leases, for stores without
// a cheaper way (Redlock: a window then needs a majority of nodes).
func LockWindows(s Store) Windows { return lockWindows{s} }

type lockWindows struct{ s Store }

func (w lockWindows) TakeWindow(ctx context.Context, key, id string, window time.Duration) (time.Duration, error) {
	_, err := w.s.Acquire(ctx, windowPrefix+key, AcquireRequest{Token: id, TTL: window})
	if held, ok := errors.AsType[*HeldError](err); ok {
		return max(held.Remaining, time.Millisecond), nil
	}
	return 0, err
}
