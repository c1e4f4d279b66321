// Package lockstore is lockgateway's domain: leases (locks with a time to
// live) on named keys, the Store contract every backend implements, and the
// errors callers branch on.
//
// Two invariants hold for every Store:
//
//   - At most one token holds a key at any instant, as the store sees time.
//     Extend and Release act only for the token that holds the key, and Extend
//     never brings back a lease that has already expired.
//   - Every grant to a new holder carries a fence strictly greater than every
//     fence handed out before for the same key.
//
// # Why fences exist
//
// A lease cannot stop a client that was paused (a GC pause, a swapped-out VM,
// a slow network) from acting after its lease ran out, while a second client
// already holds the lock. No lock service can prevent that; the resource being
// protected can, if every write carries the fence it was granted with and the
// resource refuses writes whose fence is lower than the highest it has seen
// (Kleppmann, "How to do distributed locking"; Chubby's sequencers).
//
// # Fences across restarts
//
// Backends seed fences from the store's own clock in microseconds:
// fence = max(previous+1, now in µs). A store that forgot its counters (a
// Redis restarted without persistence, a restarted gateway process with the
// Memory backend) therefore starts above every fence it handed out before, as
// long as its clock did not step backwards by more than the time it was down.
//
// # Redlock
//
// Redlock keeps a lease on a majority of independent Redis masters, so it
// survives a minority of them dying; its rules and their proof are in
// docs/safety.md, its exact guarantees in the Redlock type's documentation,
// and the timing assumptions it rests on (and what breaks them) in
// docs/backends.md. Fences are the answer when they break: a resource that
// refuses fences lower than the highest it has seen stays consistent even
// when two clients believe they hold the lock.
package lockstore

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"github.com/lockgateway/lockgateway/internal/randid"
)

// Store hands out leases. Implementations are safe for concurrent use.
type Store interface {
	// Acquire takes key for token for ttl. A key already held by the same
	// token is re-granted with the same fence and its TTL ttl from now (a
	// lease is never shortened), so a client may retry an acquire whose
	// response it lost. A key held by
	// another token fails with a *HeldError, at once or, when req.Wait is
	// positive, once the wait has run out. Waiters are granted in arrival
	// order (Memory, Redis; Redlock waits without a queue), and a free key
	// goes to the first waiter, not to a newcomer.
	Acquire(ctx context.Context, key string, req AcquireRequest) (Lease, error)
	// Extend sets the TTL of a lease token holds to ttl from now, never
	// shortening it (the Lease answered says now+ttl, the least it holds);
	// a ttl of 0 means the lease's own length, the one it was last granted
	// or extended with (read and applied atomically by the store).
	// It fails with ErrNotHeld when the key is free and ErrTokenMismatch
	// when another token holds it.
	Extend(ctx context.Context, key, token string, ttl time.Duration) (Lease, error)
	// Release frees a key token holds, with the same errors as Extend.
	Release(ctx context.Context, key, token string) error
	// Inspect reports who holds key, without its token; ErrNotHeld when free.
	Inspect(ctx context.Context, key string) (Lease, error)
	// Ping reports whether the backend answers (ErrUnavailable when it does
	// not) and, where the store can tell, takes writes (ErrRefused).
	Ping(ctx context.Context) error
	// Close releases the store's resources (not the locks it holds).
	Close() error
}

// BatchExtender is a Store that extends many leases in one call to its
// backend (a pipeline), so that holds renewing together cost one round
// trip rather than one each. Each Extension fails or succeeds as Extend
// would; results are in the order of exts.
type BatchExtender interface {
	ExtendBatch(ctx context.Context, exts []Extension) []Extended
}

// ExtendAll extends exts through s: in one batch when s is a
// BatchExtender, else each with Extend, all at once.
func ExtendAll(ctx context.Context, s Store, exts []Extension) []Extended {
	return extendAll(ctx, s, exts, BatchExtender.ExtendBatch, extendLease(s))
}

// ExtendEach runs s.Extend for exts[i], for every i in which (all when
// which is nil), at once, with each extension's user as the quota hint:
// what a BatchExtender does for the extensions it does not batch.
func ExtendEach(ctx context.Context, s Store, exts []Extension, out []Extended, which []int) {
	extendEach(ctx, exts, out, which, extendLease(s))
}

// extendLease is s.Extend of one Extension, with its user as the quota
// hint.
func extendLease(s Store) func(context.Context, Extension) Extended {
	return func(ctx context.Context, e Extension) Extended {
		if e.User != "" {
			ctx = WithUser(ctx, e.User)
		}
		l, err := s.Extend(ctx, e.Key, e.Token, e.TTL)
		return Extended{Lease: l, Err: err}
	}
}

// extendAll is ExtendAll and SemExtendAll: exts through batch when store
// is a B (it batches), else through extend, each, all at once; the
// outcomes in the order of exts.
func extendAll[B, R any](ctx context.Context, store any, exts []Extension,
	batch func(B, context.Context, []Extension) []R, extend func(context.Context, Extension) R,
) []R {
	if b, ok := store.(B); ok {
		return batch(b, ctx, exts)
	}
	out := make([]R, len(exts))
	extendEach(ctx, exts, out, nil, extend)
	return out
}

// extendEach sets out[i] to extend's outcome for exts[i], for every i in
// which (all when which is nil), each in a goroutine of its own: what
// ExtendEach and SemExtendEach do with their store's extend.
func extendEach[R any](ctx context.Context, exts []Extension, out []R, which []int, extend func(context.Context, Extension) R) {
	if which == nil {
		which = make([]int, len(exts))
		for i := range which {
			which[i] = i
		}
	}
	var wg sync.WaitGroup
	for _, i := range which {
		wg.Go(func() { out[i] = extend(ctx, exts[i]) })
	}
	wg.Wait()
}

// Extension is one lease to extend in a batch: Extend's arguments, and the
// user its lock counts against (WithUser's hint) when quotas are on.
type Extension struct {
	Key, Token, User string
	TTL              time.Duration
}

// Extended is one Extension's outcome.
type Extended struct {
	Lease Lease
	Err   error
}

// AcquireRequest is what a caller asks for when taking a lease.
type AcquireRequest struct {
	Token string        // the caller's secret; see NewToken
	TTL   time.Duration // lease length, at least MinTTL
	Owner string        // free-form label shown by Inspect; may be empty
	// Wait is how long to wait for a key held by another token; 0 tries
	// once. The context may end the wait sooner.
	Wait time.Duration
	// Quota, when its Max is positive, caps the live locks of its user: a
	// new grant that would pass it fails with ErrUserQuota (checked when
	// the key could be granted, so a held key is still ErrHeld). Memory
	// and Redis count; Redlock refuses a quota (ErrInvalid).
	Quota Quota
	// HoldAtLeast, when positive, keeps the key from every token until
	// this long after a new grant, even if the lease is released sooner:
	// the release leaves a lingering value, nobody's lease, until then
	// (docs/safety.md, rule L). A renewal keeps the first grant's end.
	HoldAtLeast time.Duration
}

// Lease describes a held lock.
type Lease struct {
	Key   string
	Token string // empty when the lease comes from Inspect
	Owner string
	Fence int64
	// Granted is the length the lease was granted or last extended with:
	// what Acquire or Extend applied, and from Inspect what the store
	// recorded (0 for a lease written by an older gateway).
	Granted time.Duration
	// Left is, from Inspect, the time the lease had left when the store
	// answered; 0 from Acquire and Extend, whose lease has Granted left.
	Left time.Duration
	// ExpiresAt, from Acquire and Extend, is a conservative end of
	// validity: never later than the moment the store lets the lease go,
	// whatever rate within A3 its clocks run at (docs/safety.md, rule E).
	// From Inspect it is the end the store read (Redlock: its majority's,
	// less the same allowance).
	ExpiresAt time.Time
	// Renewed is true when Acquire found the key already held by the same
	// token and reset its TTL rather than granting it anew.
	Renewed bool
}

// MinTTL is the shortest lease a Store accepts.
const MinTTL = 10 * time.Millisecond

// NewToken returns a fresh random token: 128 bits from crypto/rand, encoded
// as 22 characters of URL-safe base64.
func NewToken() string { return randid.New(16) }

// The Check functions are the argument checks of the store methods, so
// that every backend refuses the same requests (ErrInvalid), and before
// it touches its state.

// CheckAcquire checks an Acquire's arguments (a Quota apart: CheckQuota).
func CheckAcquire(key string, req AcquireRequest) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case req.Token == "":
		return fmt.Errorf("%w: empty token", ErrInvalid)
	case req.TTL < MinTTL:
		return fmt.Errorf("%w: ttl %v below %v", ErrInvalid, req.TTL, MinTTL)
	case req.HoldAtLeast < 0:
		return fmt.Errorf("%w: hold at least %v is negative", ErrInvalid, req.HoldAtLeast)
	}
	return nil
}

// CheckExtend checks an Extend's or a SemExtend's arguments, where a ttl
// of 0 means the lease's own length.
func CheckExtend(key, token string, ttl time.Duration) error {
	if ttl == 0 {
		ttl = MinTTL
	}
	return checkToken(key, token, ttl)
}

// CheckRelease checks a Release's or a SemRelease's arguments.
func CheckRelease(key, token string) error { return checkToken(key, token, MinTTL) }

func checkToken(key, token string, ttl time.Duration) error {
	return CheckAcquire(key, AcquireRequest{Token: token, TTL: ttl})
}

// TokenDigest is what stores keep instead of a token, so a memory dump, an
// RDB file or Redis MONITOR never shows a token that could release a lock.
func TokenDigest(token string) [32]byte { return sha256.Sum256([]byte(token)) }
