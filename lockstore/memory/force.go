package memory

import (
	"context"

	"github.com/lockgateway/lockgateway/lockstore"
)

var _ lockstore.Forcer = (*Store)(nil)

// ForceRelease implements lockstore.Forcer: Release of whichever lease
// holds key (with fence, when not 0), in the same atomic step.
func (m *Store) ForceRelease(ctx context.Context, key string, fence int64) (lockstore.Lease, error) {
	if err := lockstore.CheckForce(key, fence, false); err != nil {
		return lockstore.Lease{}, err
	}
	if err := ctx.Err(); err != nil {
		return lockstore.Lease{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reclaim()
	l, ok := m.locks[key]
	// A key kept after its release by a hold-at-least (rule L) is nobody's
	// lease: nothing to release, as on the Redis backends.
	if !ok || l.lingering || (fence != 0 && l.fence != fence) {
		return lockstore.Lease{}, lockstore.ErrNotHeld
	}
	out := l.lease("")
	m.release(l)
	return out, nil
}

// SemForceRelease implements lockstore.Forcer: SemRelease of the permit
// with fence, in the same atomic step.
func (m *Store) SemForceRelease(ctx context.Context, key string, fence int64) (lockstore.Permit, error) {
	if err := lockstore.CheckForce(key, fence, true); err != nil {
		return lockstore.Permit{}, err
	}
	if err := ctx.Err(); err != nil {
		return lockstore.Permit{}, err
	}
	ss := &m.sems
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.reclaim()
	s := ss.keys[key]
	if s == nil {
		return lockstore.Permit{}, lockstore.ErrNotHeld
	}
	for d, p := range s.permits {
		if p.fence == fence {
			out := p.permit(key, "", s.limit)
			ss.release(key, s, d, p)
			return out, nil
		}
	}
	return lockstore.Permit{}, lockstore.ErrNotHeld
}
