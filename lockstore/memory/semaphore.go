package memory

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgateway/lockgateway/internal/expiry"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/wait"
)

// semaphores is a Store's semaphores. They have a mutex of their own: locks
// and semaphores never touch each other's state.
type semaphores struct {
	mu     sync.Mutex
	keys   map[string]*semaphore
	expiry expiry.Queue[semRef] // every permit, by expiry
	fence  int64                // last fence handed out, shared by all keys
	// live is expiry.Len(), for the lock side's MaxLocks check, which
	// reads it without mu: permits count against MaxLocks like locks.
	live atomic.Int64
	// signals: key → its watchers' wake-ups (SemSignal, signal.go).
	signals signals
}

type semRef struct {
	key    string
	digest [32]byte
}

type semaphore struct {
	limit   int // the limit its holders were granted under
	permits map[[32]byte]*permit
	queue   []*waiter // in arrival order
}

type permit struct {
	owner   string
	fence   int64
	length  time.Duration
	expires *expiry.Entry[semRef]
}

var (
	_ lockstore.Semaphores  = (*Store)(nil)
	_ lockstore.SemSignaler = (*Store)(nil)
)

// SemAcquire implements lockstore.Semaphores. Waiters queue per key; the
// first k of them may take the k free permits, a newcomer only a permit no
// waiter is owed.
func (m *Store) SemAcquire(ctx context.Context, key string, req lockstore.PermitRequest) (lockstore.Permit, error) {
	if err := lockstore.CheckPermit(key, req); err != nil {
		return lockstore.Permit{}, err
	}
	if err := ctx.Err(); err != nil {
		return lockstore.Permit{}, err
	}
	ss := &m.sems
	digest := lockstore.TokenDigest(req.Token)
	p, _, err := ss.try(key, digest, req, nil, m.capPermits)
	if _, full := errors.AsType[*lockstore.FullError](err); !full || req.Wait <= 0 {
		return p, err
	}

	w := &waiter{wake: make(chan struct{}, 1)}
	ss.mu.Lock()
	s := ss.sem(key)
	s.queue = append(s.queue, w)
	ss.mu.Unlock()
	defer ss.leave(key, w)

	try := func() wait.Try {
		var head bool
		p, head, err = ss.try(key, digest, req, w, m.capPermits)
		if full, ok := errors.AsType[*lockstore.FullError](err); ok {
			return wait.Queued(head, full.Remaining) // the first permit to expire is ours
		}
		return wait.Try{Answer: wait.Done}
	}
	if werr := wait.For(ctx, time.Now().Add(req.Wait), w.wake, wait.Told, try); werr != nil {
		return lockstore.Permit{}, werr
	}
	return p, err
}

// sem returns key's semaphore, making it. ss.mu must be held.
func (ss *semaphores) sem(key string) *semaphore {
	if ss.keys == nil {
		ss.keys = make(map[string]*semaphore)
	}
	s := ss.keys[key]
	if s == nil {
		s = &semaphore{permits: make(map[[32]byte]*permit)}
		ss.keys[key] = s
	}
	return s
}

// try grants digest a permit if one is free and no earlier waiter is owed
// it; w is the caller's place in the queue (nil: not queued). head reports
// whether w is first.
func (ss *semaphores) try(key string, digest [32]byte, req lockstore.PermitRequest, w *waiter, caps func(now time.Time) error) (_ lockstore.Permit, head bool, _ error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := ss.reclaim()
	s := ss.sem(key)
	defer ss.tidy(key, s)
	rank := len(s.queue)
	if w != nil {
		rank = slices.Index(s.queue, w)
	}
	head = rank == 0

	if len(s.permits) > 0 && s.limit != req.Limit {
		return lockstore.Permit{}, head, &lockstore.LimitMismatchError{Limit: s.limit, Remaining: s.latest(now)}
	}
	if p, ok := s.permits[digest]; ok {
		out := ss.lengthen(p, req.TTL, now).permit(key, req.Token, s.limit)
		out.ExpiresAt = now.Add(req.TTL)
		out.Renewed = true
		ss.signals.notify(key)
		return out, head, nil
	}
	free := req.Limit - len(s.permits)
	if rank >= free {
		full := &lockstore.FullError{Limit: req.Limit}
		if free <= 0 {
			full.Remaining = s.earliest(now)
		}
		return lockstore.Permit{}, head, full
	}
	if err := caps(now); err != nil {
		return lockstore.Permit{}, head, err
	}
	ss.fence = nextFence(ss.fence, now.UnixMicro())
	ss.live.Add(1)
	p := &permit{owner: req.Owner, fence: ss.fence, length: req.TTL,
		expires: ss.expiry.Add(semRef{key, digest}, now.Add(req.TTL))}
	s.limit = req.Limit
	s.permits[digest] = p
	ss.signals.notify(key)
	if w != nil {
		ss.dequeue(s, w)
	}
	return p.permit(key, req.Token, s.limit), head, nil
}

// capPermits refuses a new permit when the store holds MaxLocks locks
// and permits together (lockstore.ErrStoreFull): the cap bounds the
// memory of both. m.sems.mu is held; it takes m.mu after it (the lock
// side never takes m.sems.mu).
func (m *Store) capPermits(now time.Time) error {
	if m.maxLocks <= 0 {
		return nil
	}
	locks := m.Len()
	if locks+int(m.sems.live.Load()) < m.maxLocks {
		return nil
	}
	at, _ := m.sems.expiry.Earliest()
	return &lockstore.CapError{Err: lockstore.ErrStoreFull, Max: m.maxLocks, Next: max(at.Sub(now), 0)}
}

// earliest is how long until the first of s's permits expires; latest,
// the last.
func (s *semaphore) earliest(now time.Time) time.Duration {
	var d time.Duration
	for _, p := range s.permits {
		if left := p.expires.At.Sub(now); d == 0 || left < d {
			d = left
		}
	}
	return d
}

func (s *semaphore) latest(now time.Time) time.Duration {
	var d time.Duration
	for _, p := range s.permits {
		d = max(d, p.expires.At.Sub(now))
	}
	return d
}

// tidy forgets key's semaphore once nothing refers to it. ss.mu must be
// held.
func (ss *semaphores) tidy(key string, s *semaphore) {
	if len(s.permits) == 0 && len(s.queue) == 0 {
		delete(ss.keys, key)
	}
}

// leave takes w out of key's queue if it is still there.
func (ss *semaphores) leave(key string, w *waiter) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s := ss.keys[key]; s != nil {
		ss.dequeue(s, w)
		ss.tidy(key, s)
	}
}

// dequeue removes w from s's queue and wakes the new first waiter when w
// was first: a permit may be free for it too. ss.mu must be held.
func (ss *semaphores) dequeue(s *semaphore, w *waiter) {
	i := slices.Index(s.queue, w)
	if i < 0 {
		return
	}
	s.queue = slices.Delete(s.queue, i, i+1)
	if i == 0 {
		s.wakeHead()
	}
}

func (s *semaphore) wakeHead() {
	if len(s.queue) > 0 {
		select {
		case s.queue[0].wake <- struct{}{}:
		default:
		}
	}
}

// reclaim drops every expired permit and returns the time it judged by.
// ss.mu must be held.
func (ss *semaphores) reclaim() time.Time {
	now := time.Now()
	ss.expiry.PopExpired(now, func(r semRef) {
		ss.live.Add(-1)
		s := ss.keys[r.key]
		delete(s.permits, r.digest)
		ss.tidy(r.key, s)
	})
	return now
}

// owned returns token's permit on key. ss.mu must be held.
func (ss *semaphores) owned(key, token string) (*semaphore, *permit, error) {
	s := ss.keys[key]
	if s == nil || len(s.permits) == 0 {
		return nil, nil, lockstore.ErrNotHeld
	}
	p, ok := s.permits[lockstore.TokenDigest(token)]
	if !ok {
		return nil, nil, lockstore.ErrTokenMismatch
	}
	return s, p, nil
}

// SemExtend implements lockstore.Semaphores.
func (m *Store) SemExtend(ctx context.Context, key, token string, ttl time.Duration) (lockstore.Permit, error) {
	if err := lockstore.CheckExtend(key, token, ttl); err != nil {
		return lockstore.Permit{}, err
	}
	if err := ctx.Err(); err != nil {
		return lockstore.Permit{}, err
	}
	ss := &m.sems
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := ss.reclaim()
	s, p, err := ss.owned(key, token)
	if err != nil {
		return lockstore.Permit{}, err
	}
	if ttl == 0 {
		ttl = p.length
	}
	out := ss.lengthen(p, ttl, now).permit(key, token, s.limit)
	out.ExpiresAt = now.Add(ttl)
	ss.signals.notify(key)
	return out, nil
}

// SemRelease implements lockstore.Semaphores.
func (m *Store) SemRelease(ctx context.Context, key, token string) error {
	if err := lockstore.CheckRelease(key, token); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ss := &m.sems
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.reclaim()
	s, p, err := ss.owned(key, token)
	if err != nil {
		return err
	}
	ss.release(key, s, lockstore.TokenDigest(token), p)
	return nil
}

// release frees p, the permit of digest on s (key) that a SemRelease or
// a SemForceRelease found held, and wakes the first waiter. ss.mu must be
// held.
func (ss *semaphores) release(key string, s *semaphore, digest [32]byte, p *permit) {
	ss.expiry.Remove(p.expires)
	ss.live.Add(-1)
	delete(s.permits, digest)
	s.wakeHead()
	ss.signals.notify(key)
	ss.tidy(key, s)
}

// SemInspect implements lockstore.Semaphores.
func (m *Store) SemInspect(ctx context.Context, key string) (lockstore.SemaphoreState, error) {
	if err := ctx.Err(); err != nil {
		return lockstore.SemaphoreState{}, err
	}
	ss := &m.sems
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := ss.reclaim()
	s := ss.keys[key]
	if s == nil || len(s.permits) == 0 {
		return lockstore.SemaphoreState{}, lockstore.ErrNotHeld
	}
	return s.state(key, now), nil
}

// state is s as SemInspect reports it, at now. ss.mu must be held.
func (s *semaphore) state(key string, now time.Time) lockstore.SemaphoreState {
	st := lockstore.SemaphoreState{Key: key, Limit: s.limit}
	for _, p := range s.permits {
		h := p.permit(key, "", s.limit)
		h.Left = p.expires.At.Sub(now)
		st.Holders = append(st.Holders, h)
	}
	lockstore.SortHolders(st.Holders)
	return st
}

func (p *permit) permit(key, token string, limit int) lockstore.Permit {
	return lockstore.Permit{Key: key, Token: token, Owner: p.owner, Limit: limit, Fence: p.fence,
		Granted: p.length, ExpiresAt: p.expires.At}
}

// lengthen is a permit's renewal or extend: as a lock's (Store.lengthen),
// it never shortens the permit.
func (ss *semaphores) lengthen(p *permit, ttl time.Duration, now time.Time) *permit {
	p.length = ttl
	if at := now.Add(ttl); at.After(p.expires.At) {
		ss.expiry.Move(p.expires, at)
	}
	return p
}
