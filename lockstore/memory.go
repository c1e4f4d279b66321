package lockstore

import (
	"context"
	"sync"
	"time"

	"github.com/lockgateway/lockgateway/internal/expiry"
)

// Memory is an in-process Store: zero setup, for a single gateway process.
// Locks live only as long as the process does.
//
// Expiry uses Go's monotonic clock, exact to the nanosecond. Expired leases
// are reclaimed by every call from a queue ordered by expiry, so memory
// stays proportional to the locks currently held and no goroutine runs per
// lock (or at all).
type Memory struct {
	mu     sync.Mutex
	locks  map[string]*memLock
	expiry expiry.Queue[string]
	fence  int64 // last fence handed out, shared by all keys
}

type memLock struct {
	key     string
	digest  [32]byte
	owner   string
	fence   int64
	expires *expiry.Entry[string] // its At carries a monotonic reading
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty Memory store.
func NewMemory() *Memory {
	return &Memory{locks: make(map[string]*memLock)}
}

// Acquire implements Store.
func (m *Memory) Acquire(ctx context.Context, key string, req AcquireRequest) (Lease, error) {
	if err := checkAcquire(key, req); err != nil {
		return Lease{}, err
	}
	if err := ctx.Err(); err != nil {
		return Lease{}, err
	}
	digest := tokenDigest(req.Token)

	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.reclaim()

	if l, ok := m.locks[key]; ok {
		if l.digest != digest {
			return Lease{}, &HeldError{Remaining: l.expires.At.Sub(now)}
		}
		m.expiry.Move(l.expires, now.Add(req.TTL))
		lease := l.lease(req.Token, req.TTL)
		lease.Renewed = true
		return lease, nil
	}

	// One counter for all keys: strictly increasing per key a fortiori, and
	// nothing to remember once a key is free.
	m.fence = nextFence(m.fence, now.UnixMicro())
	l := &memLock{key: key, digest: digest, owner: req.Owner, fence: m.fence, expires: m.expiry.Add(key, now.Add(req.TTL))}
	m.locks[key] = l
	return l.lease(req.Token, req.TTL), nil
}

// Extend implements Store.
func (m *Memory) Extend(ctx context.Context, key, token string, ttl time.Duration) (Lease, error) {
	if err := checkToken(key, token, ttl); err != nil {
		return Lease{}, err
	}
	if err := ctx.Err(); err != nil {
		return Lease{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.reclaim()
	l, err := m.owned(key, token)
	if err != nil {
		return Lease{}, err
	}
	m.expiry.Move(l.expires, now.Add(ttl))
	return l.lease(token, ttl), nil
}

// Release implements Store.
func (m *Memory) Release(ctx context.Context, key, token string) error {
	if err := checkToken(key, token, MinTTL); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reclaim()
	l, err := m.owned(key, token)
	if err != nil {
		return err
	}
	m.expiry.Remove(l.expires)
	delete(m.locks, key)
	return nil
}

// Inspect implements Store.
func (m *Memory) Inspect(ctx context.Context, key string) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.reclaim()
	l, ok := m.locks[key]
	if !ok {
		return Lease{}, ErrNotHeld
	}
	return l.lease("", l.expires.At.Sub(now)), nil
}

// Ping implements Store; memory always answers.
func (m *Memory) Ping(ctx context.Context) error { return ctx.Err() }

// Close implements Store.
func (m *Memory) Close() error { return nil }

// Len reports how many unexpired locks the store holds.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reclaim()
	return len(m.locks)
}

// owned returns key's lock if token holds it. m.mu must be held.
func (m *Memory) owned(key, token string) (*memLock, error) {
	l, ok := m.locks[key]
	if !ok {
		return nil, ErrNotHeld
	}
	if l.digest != tokenDigest(token) {
		return nil, ErrTokenMismatch
	}
	return l, nil
}

// reclaim drops every expired lock and returns the time it judged by.
// m.mu must be held.
func (m *Memory) reclaim() time.Time {
	now := time.Now()
	m.expiry.PopExpired(now, func(key string) { delete(m.locks, key) })
	return now
}

func (l *memLock) lease(token string, ttl time.Duration) Lease {
	return Lease{
		Key:       l.key,
		Token:     token,
		Owner:     l.owner,
		Fence:     l.fence,
		TTL:       ttl,
		ExpiresAt: l.expires.At,
	}
}
