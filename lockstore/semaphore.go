package lockstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"
)

// Semaphores hands out permits: leases on a key of which at most Limit
// are held at once. It is separate from Store so that a Store need not
// have semaphores; Memory, Redis and Redlock implement both. A semaphore
// key and a lock key of the same name are unrelated.
//
// Its invariants, for every implementation:
//
//   - At no instant, as the store sees time, do more than Limit tokens hold
//     permits on a key, whichever gateway granted them.
//   - Every permit granted to a new holder carries a fence strictly
//     greater than every fence handed out before on the same key.
//   - Expired permits free themselves; Extend never brings one back.
type Semaphores interface {
	// SemAcquire grants token a permit on key. A token that already holds
	// one is re-granted the same permit (same fence, TTL reset), so a
	// client may retry an acquire whose answer it lost. When all Limit
	// permits are held it fails with a *FullError, at once or, when
	// req.Wait is positive, once the wait has run out; waiters are served
	// in arrival order (Memory, Redis; Redlock waits without a queue).
	// When the current holders were granted under another limit it fails
	// with a *LimitMismatchError.
	SemAcquire(ctx context.Context, key string, req PermitRequest) (Permit, error)
	// SemExtend resets the TTL of token's permit to ttl from now (0: the
	// permit's own length). ErrNotHeld when nobody holds a permit on key,
	// ErrTokenMismatch when others do but token does not.
	SemExtend(ctx context.Context, key, token string, ttl time.Duration) (Permit, error)
	// SemRelease gives token's permit back, with the errors of SemExtend.
	SemRelease(ctx context.Context, key, token string) error
	// SemInspect reports the permits held on key, without their tokens;
	// ErrNotHeld when there are none.
	SemInspect(ctx context.Context, key string) (SemaphoreState, error)
}

// MaxLimit is the largest limit a semaphore may have.
const MaxLimit = 10000

// PermitRequest is what a caller asks for when taking a permit.
type PermitRequest struct {
	Token string        // the caller's secret; see NewToken
	TTL   time.Duration // permit length, at least MinTTL
	Owner string        // free-form label shown by SemInspect
	Limit int           // how many permits the key has, 1 … MaxLimit
	// Wait is how long to wait while all permits are held; 0 tries once.
	Wait time.Duration
}

// Permit is one held permit. Its fields mean what Lease's do.
type Permit struct {
	Key       string
	Token     string // empty from SemInspect
	Owner     string
	Limit     int
	Fence     int64
	Granted   time.Duration
	Left      time.Duration // from SemInspect only
	ExpiresAt time.Time     // as Lease.ExpiresAt
	Renewed   bool
}

// SemaphoreState is a semaphore as SemInspect sees it: its limit and its
// holders, ordered by fence.
type SemaphoreState struct {
	Key     string
	Limit   int
	Holders []Permit
}

// SortHolders orders permits by fence, as SemaphoreState.Holders is.
func SortHolders(hs []Permit) {
	slices.SortFunc(hs, func(a, b Permit) int { return cmp.Compare(a.Fence, b.Fence) })
}

// CheckPermit checks a SemAcquire's arguments.
func CheckPermit(key string, req PermitRequest) error {
	if req.Limit < 1 || req.Limit > MaxLimit {
		return fmt.Errorf("%w: limit %d outside 1 … %d", ErrInvalid, req.Limit, MaxLimit)
	}
	return CheckAcquire(key, AcquireRequest{Token: req.Token, TTL: req.TTL})
}
