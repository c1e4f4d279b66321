// Package memory is the in-process backend: a lockstore.Store and
// lockstore.Semaphores for a single gateway process, with nothing to set
// up. Its locks and permits live only as long as the process does; a
// restarted process starts its fences above every fence it handed out
// before (lockstore's package doc, "Fences across restarts").
package memory

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lockgateway/lockgateway/internal/expiry"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/wait"
)

// Store is the in-process store of locks and permits.
//
// Expiry uses Go's monotonic clock, exact to the nanosecond. Expired leases
// are reclaimed by every call from a queue ordered by expiry, so memory
// stays proportional to the locks currently held and no goroutine runs per
// lock (or at all).
//
// Caps on live locks (a user's lockstore.Quota, Options.MaxLocks) are
// exact: every lock counts from its grant until its release or expiry.
type Store struct {
	mu       sync.Mutex
	locks    map[string]*lock
	queues   map[string][]*waiter // waiters per key, in arrival order
	expiry   expiry.Queue[string]
	fence    int64 // last fence handed out, shared by all keys
	maxLocks int
	users    map[string]*user // users with a counted lock
	// signals: key → its watchers' wake-ups (Signal, signal.go).
	signals signals
	sems    semaphores // semaphore.go
}

type lock struct {
	key    string
	digest [32]byte
	owner  string
	fence  int64
	// length is the TTL the lease was last granted or extended with: what
	// an Extend with a ttl of 0 applies again.
	length  time.Duration
	expires *expiry.Entry[string] // its At carries a monotonic reading
	// user is whom the lock counts against (nil: granted without a
	// quota); counted is its place in the user's queue.
	user    *user
	counted *expiry.Entry[string]
	// atLeast is when a grant with HoldAtLeast lets the key go at the
	// earliest; lingering: released before it, the lock is nobody's lease
	// and keeps the key from every token until then (docs/safety.md, rule
	// L).
	atLeast   time.Time
	lingering bool
}

// user is one user's counted locks by expiry: their number is the count,
// the first the soonest one frees by itself.
type user struct {
	name  string
	locks expiry.Queue[string]
}

// Options configures a Store.
type Options struct {
	// MaxLocks caps the locks the store holds at once (0: no cap), so a
	// client cannot make it hold more memory than the operator allowed.
	// Rate-limit windows (TakeWindow) are never refused, but take places.
	MaxLocks int
}

// waiter is a request waiting for a key; wake tells it to try again.
type waiter struct{ wake chan struct{} }

var (
	_ lockstore.Store     = (*Store)(nil)
	_ lockstore.Signaler  = (*Store)(nil)
	_ lockstore.Windows   = (*Store)(nil)
	_ lockstore.Lister    = (*Store)(nil)
	_ lockstore.SemLister = (*Store)(nil)
)

// New returns an empty Store without a cap on its locks.
func New() *Store { return NewWith(Options{}) }

// NewWith returns an empty Store configured by o.
func NewWith(o Options) *Store {
	return &Store{
		locks:    make(map[string]*lock),
		queues:   make(map[string][]*waiter),
		maxLocks: max(o.MaxLocks, 0),
		users:    make(map[string]*user),
	}
}

// Acquire implements lockstore.Store. Waiters queue per key and are woken,
// in order, by the release that frees the key or at the holder's expiry.
func (m *Store) Acquire(ctx context.Context, key string, req lockstore.AcquireRequest) (lockstore.Lease, error) {
	if err := lockstore.CheckAcquire(key, req); err != nil {
		return lockstore.Lease{}, err
	}
	if err := lockstore.CheckQuota(req.Quota); err != nil {
		return lockstore.Lease{}, err
	}
	if err := ctx.Err(); err != nil {
		return lockstore.Lease{}, err
	}
	digest := lockstore.TokenDigest(req.Token)
	lease, _, err := m.try(key, digest, req, nil)
	if _, held := errors.AsType[*lockstore.HeldError](err); !held || req.Wait <= 0 {
		return lease, err
	}

	w := &waiter{wake: make(chan struct{}, 1)}
	m.mu.Lock()
	m.queues[key] = append(m.queues[key], w)
	m.mu.Unlock()
	defer m.leave(key, w)

	try := func() wait.Try {
		var head bool
		lease, head, err = m.try(key, digest, req, w)
		if held, ok := errors.AsType[*lockstore.HeldError](err); ok {
			return wait.Queued(head, held.Remaining)
		}
		return wait.Try{Answer: wait.Done}
	}
	if werr := wait.For(ctx, time.Now().Add(req.Wait), w.wake, wait.Told, try); werr != nil {
		return lockstore.Lease{}, werr
	}
	return lease, err
}

// try takes key for req if it is free and w (nil: a caller that does not
// wait) is first in its queue. head reports whether w is first.
func (m *Store) try(key string, digest [32]byte, req lockstore.AcquireRequest, w *waiter) (_ lockstore.Lease, head bool, _ error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.reclaim()
	q := m.queues[key]
	head = w != nil && len(q) > 0 && q[0] == w

	if l, ok := m.locks[key]; ok {
		if l.digest != digest || l.lingering {
			return lockstore.Lease{}, head, &lockstore.HeldError{Remaining: l.expires.At.Sub(now)}
		}
		lease := m.lengthen(l, req.TTL, now).lease(req.Token)
		lease.ExpiresAt = now.Add(req.TTL)
		lease.Renewed = true
		m.changed(key)
		return lease, head, nil
	}
	if len(q) > 0 && !head { // free, but promised to the first waiter
		return lockstore.Lease{}, false, &lockstore.HeldError{}
	}
	if err := m.checkCaps(key, req.Quota, now); err != nil {
		return lockstore.Lease{}, head, err
	}

	// One counter for all keys: strictly increasing per key a fortiori, and
	// nothing to remember once a key is free.
	m.fence = nextFence(m.fence, now.UnixMicro())
	l := &lock{key: key, digest: digest, owner: req.Owner, fence: m.fence, length: req.TTL, expires: m.expiry.Add(key, now.Add(req.TTL))}
	if req.HoldAtLeast > 0 {
		l.atLeast = now.Add(req.HoldAtLeast)
	}
	m.locks[key] = l
	m.count(l, req.Quota)
	m.changed(key)
	if head {
		m.dequeue(key, w)
	}
	return l.lease(req.Token), head, nil
}

// checkCaps refuses a new grant of key that would pass the store's cap or
// q's. m.mu must be held, and expired locks reclaimed.
func (m *Store) checkCaps(key string, q lockstore.Quota, now time.Time) error {
	if m.maxLocks > 0 && len(m.locks)+int(m.sems.live.Load()) >= m.maxLocks && !lockstore.IsWindowKey(key) {
		at, _ := m.expiry.Earliest()
		return &lockstore.CapError{Err: lockstore.ErrStoreFull, Max: m.maxLocks, Next: at.Sub(now)}
	}
	if q.Max <= 0 {
		return nil
	}
	if u := m.users[q.User]; u != nil && u.locks.Len() >= q.Max {
		at, _ := u.locks.Earliest()
		return &lockstore.CapError{Err: lockstore.ErrUserQuota, Max: q.Max, Next: at.Sub(now)}
	}
	return nil
}

// count makes l count against q's user, when q caps anything. m.mu must be
// held.
func (m *Store) count(l *lock, q lockstore.Quota) {
	if q.Max <= 0 {
		return
	}
	u := m.users[q.User]
	if u == nil {
		u = &user{name: q.User}
		m.users[q.User] = u
	}
	l.user, l.counted = u, u.locks.Add(l.key, l.expires.At)
}

// forget takes l out of the store and out of its user's count. m.mu must
// be held.
func (m *Store) forget(l *lock) {
	delete(m.locks, l.key)
	m.uncount(l)
}

// uncount takes l out of its user's count. m.mu must be held.
func (m *Store) uncount(l *lock) {
	if u := l.user; u != nil {
		u.locks.Remove(l.counted)
		if u.locks.Len() == 0 {
			delete(m.users, u.name)
		}
		l.user, l.counted = nil, nil
	}
}

// move sets l's expiry, in its user's count too. m.mu must be held.
func (m *Store) move(l *lock, at time.Time) {
	m.expiry.Move(l.expires, at)
	if l.user != nil {
		l.user.locks.Move(l.counted, at)
	}
}

// leave takes w out of key's queue if it is still there.
func (m *Store) leave(key string, w *waiter) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dequeue(key, w)
}

// dequeue removes w from key's queue and, when w was first, wakes the next
// waiter: it may take a free key, or must learn when the holder's lease
// runs out. m.mu must be held.
func (m *Store) dequeue(key string, w *waiter) {
	q := m.queues[key]
	for i, x := range q {
		if x != w {
			continue
		}
		q = append(q[:i], q[i+1:]...)
		if len(q) == 0 {
			delete(m.queues, key)
			return
		}
		m.queues[key] = q
		if i == 0 {
			m.wakeHead(key)
		}
		return
	}
}

// wakeHead tells key's first waiter to try again. m.mu must be held.
func (m *Store) wakeHead(key string) {
	if q := m.queues[key]; len(q) > 0 {
		select {
		case q[0].wake <- struct{}{}:
		default: // already told
		}
	}
}

// Extend implements lockstore.Store.
func (m *Store) Extend(ctx context.Context, key, token string, ttl time.Duration) (lockstore.Lease, error) {
	if err := lockstore.CheckExtend(key, token, ttl); err != nil {
		return lockstore.Lease{}, err
	}
	if err := ctx.Err(); err != nil {
		return lockstore.Lease{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.reclaim()
	l, err := m.owned(key, token)
	if err != nil {
		return lockstore.Lease{}, err
	}
	if ttl == 0 {
		ttl = l.length
	}
	lease := m.lengthen(l, ttl, now).lease(token)
	lease.ExpiresAt = now.Add(ttl)
	m.changed(key)
	return lease, nil
}

// lengthen is a renewal's or an extend's write: the lease's expiry moves to
// now+ttl, or stays where it is when that is later. A lease is never
// shortened, on any backend (docs/safety.md, "Late writes on redis", rule
// V1); the holder is told now+ttl, the least it holds.
func (m *Store) lengthen(l *lock, ttl time.Duration, now time.Time) *lock {
	l.length = ttl
	if at := now.Add(ttl); at.After(l.expires.At) {
		m.move(l, at)
	}
	return l
}

// Release implements lockstore.Store.
func (m *Store) Release(ctx context.Context, key, token string) error {
	if err := lockstore.CheckRelease(key, token); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.reclaim()
	l, err := m.owned(key, token)
	if err != nil {
		return err
	}
	if now.Before(l.atLeast) {
		// Released before its hold-at-least end: out of its user's count,
		// as a release, but the key stays held by nobody until then.
		m.uncount(l)
		l.lingering = true
		m.expiry.Move(l.expires, l.atLeast)
		m.changed(key)
		return nil
	}
	m.release(l)
	return nil
}

// release frees l, the lease a Release or a ForceRelease found holding
// its key, and wakes the key's first waiter, whatever its hold-at-least:
// a forced release frees the key at once. m.mu must be held.
func (m *Store) release(l *lock) {
	m.expiry.Remove(l.expires)
	m.forget(l)
	m.wakeHead(l.key)
	m.changed(l.key)
}

// Inspect implements lockstore.Store.
func (m *Store) Inspect(ctx context.Context, key string) (lockstore.Lease, error) {
	if err := ctx.Err(); err != nil {
		return lockstore.Lease{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.reclaim()
	l, ok := m.locks[key]
	if !ok {
		return lockstore.Lease{}, lockstore.ErrNotHeld
	}
	lease := l.lease("")
	lease.Left = l.expires.At.Sub(now)
	return lease, nil
}

// TakeWindow implements lockstore.Windows: in memory a lease costs nothing extra.
func (m *Store) TakeWindow(ctx context.Context, key, id string, window time.Duration) (time.Duration, error) {
	return lockstore.LockWindows(m).TakeWindow(ctx, key, id, window)
}

// Ping implements lockstore.Store; memory always answers.
func (m *Store) Ping(ctx context.Context) error { return ctx.Err() }

// Close implements lockstore.Store.
func (m *Store) Close() error { return nil }

// Len reports how many unexpired locks the store holds.
func (m *Store) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reclaim()
	return len(m.locks)
}

// owned returns key's lock if token holds it. m.mu must be held.
func (m *Store) owned(key, token string) (*lock, error) {
	l, ok := m.locks[key]
	if !ok {
		return nil, lockstore.ErrNotHeld
	}
	switch {
	case l.digest != lockstore.TokenDigest(token):
		return nil, lockstore.ErrTokenMismatch
	case l.lingering: // released before its hold-at-least end
		return nil, lockstore.ErrNotHeld
	}
	return l, nil
}

// reclaim drops every expired lock and returns the time it judged by.
// m.mu must be held.
func (m *Store) reclaim() time.Time {
	now := time.Now()
	m.expiry.PopExpired(now, func(key string) { m.forget(m.locks[key]) })
	return now
}

func (l *lock) lease(token string) lockstore.Lease {
	return lockstore.Lease{
		Key:       l.key,
		Token:     token,
		Owner:     l.owner,
		Fence:     l.fence,
		Granted:   l.length,
		ExpiresAt: l.expires.At,
	}
}

// nextFence is the fence rule of every backend (lockstore's package doc,
// "Fences across restarts"; the Redis scripts apply it too): strictly
// above the previous fence and never below the clock in microseconds.
func nextFence(prev, nowMicros int64) int64 {
	return max(prev+1, nowMicros)
}
