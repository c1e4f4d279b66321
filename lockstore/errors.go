package lockstore

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// The errors of the lockstore contract, every one: what a caller (the
// handlers) tells apart with errors.Is and errors.As. The backends wrap
// them with detail; none defines an error of its own a caller must know.

var (
	// ErrHeld means another token holds the key. The error is a *HeldError.
	ErrHeld = errors.New("lockstore: lock held by another token")
	// ErrNotHeld means nobody holds the key: never taken, released, or expired.
	ErrNotHeld = errors.New("lockstore: lock not held")
	// ErrTokenMismatch means the key is held, but by another token.
	ErrTokenMismatch = errors.New("lockstore: token does not hold the lock")
	// ErrForced marks an ErrNotHeld or an ErrTokenMismatch of an extend
	// (a renewal): the token's lease was released by force (Forcer), by
	// this gateway or another, before it would have ended. It never comes
	// alone: every error that carries it is also one of those two, as the
	// extend would have answered without it (Forced), so a caller that
	// does not look for it keeps its behaviour. A hold ends with reason
	// "forced" on it (docs/safety.md, "Forced releases").
	ErrForced = errors.New("lockstore: the lease was released by force")
	// ErrUnavailable means the backend could not answer in time. The
	// outcome of the operation is unknown; retrying with the same token is
	// safe.
	ErrUnavailable = errors.New("lockstore: backend unavailable")
	// ErrRefused means the backend answered but refused to write, so
	// nothing was written: Redis out of memory (maxmemory with noeviction),
	// a read-only replica, a failed snapshot that stops writes (MISCONF),
	// fewer replicas than min-replicas-to-write, or a script running too
	// long (BUSY). It lasts until an operator or Redis itself fixes the
	// cause. The error is a *RefusedError, which is also ErrUnavailable.
	ErrRefused = errors.New("lockstore: backend refuses writes")
	// ErrInvalid means the request breaks a rule the store enforces
	// (an empty key or token, a TTL below MinTTL).
	ErrInvalid = errors.New("lockstore: invalid request")
)

// HeldError is returned by Acquire when another token holds the key.
type HeldError struct {
	// Remaining is how long the current lease has left, as the store saw it.
	Remaining time.Duration
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%v (%v left)", ErrHeld, e.Remaining)
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// RefusedError is returned when the backend refuses writes (ErrRefused).
type RefusedError struct {
	// Reason is Redis's error code in lower case: "oom", "readonly",
	// "misconf", "noreplicas" or "busy".
	Reason string
	Msg    string
}

func (e *RefusedError) Error() string { return ErrRefused.Error() + ": " + e.Msg }

// Is makes errors.Is true for ErrRefused and ErrUnavailable: callers that
// only know "the backend cannot serve this now" treat it like an outage.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused || target == ErrUnavailable }

var (
	// ErrUserQuota means the grant would give the user more live locks
	// than its Quota allows. Nothing was taken. The error is a *CapError.
	ErrUserQuota = errors.New("lockstore: the user holds its maximum of live locks")
	// ErrStoreFull means the store holds the most live locks it may
	// (memory.Options.MaxLocks). Nothing was taken. The error is a
	// *CapError.
	ErrStoreFull = errors.New("lockstore: the store holds its maximum of live locks")
)

// CapError is returned by Acquire when a grant would pass a cap on live
// locks: the user's (ErrUserQuota) or the store's (ErrStoreFull).
type CapError struct {
	Err error // ErrUserQuota or ErrStoreFull
	Max int   // the cap
	// Next is how long until the earliest of the locks counted against the
	// cap expires: the soonest a place frees by itself (a release frees
	// one sooner).
	Next time.Duration
}

func (e *CapError) Error() string {
	return fmt.Sprintf("%v (%d; the earliest expires in %v)", e.Err, e.Max, e.Next)
}

// Unwrap makes errors.Is(err, ErrUserQuota) or errors.Is(err, ErrStoreFull) true.
func (e *CapError) Unwrap() error { return e.Err }

var (
	// ErrSemaphoreFull means all permits are held. The error is a *FullError.
	ErrSemaphoreFull = errors.New("lockstore: all permits of the semaphore are held")
	// ErrLimitMismatch means the current holders were granted under another
	// limit. The error is a *LimitMismatchError.
	ErrLimitMismatch = errors.New("lockstore: the semaphore's holders were granted under another limit")
)

// FullError is returned by SemAcquire when all permits are held.
type FullError struct {
	Limit int
	// Remaining is how long until the first permit may free itself; 0
	// when a permit is free but promised to an earlier waiter.
	Remaining time.Duration
}

func (e *FullError) Error() string {
	return fmt.Sprintf("%v (limit %d, %v until one may expire)", ErrSemaphoreFull, e.Limit, e.Remaining)
}

// Is makes errors.Is(err, ErrSemaphoreFull) true.
func (e *FullError) Is(target error) bool { return target == ErrSemaphoreFull }

// LimitMismatchError is returned by SemAcquire when the limit asked for
// differs from the one the current holders were granted under.
type LimitMismatchError struct {
	Limit int // the holders' limit
	// Remaining is how long until the last current permit may expire (and
	// the key takes any limit again); 0 when unknown.
	Remaining time.Duration
}

func (e *LimitMismatchError) Error() string {
	return fmt.Sprintf("%v (%d)", ErrLimitMismatch, e.Limit)
}

// Is makes errors.Is(err, ErrLimitMismatch) true.
func (e *LimitMismatchError) Is(target error) bool { return target == ErrLimitMismatch }

// ErrReplicas says that fewer replicas acknowledged a write than
// LOCKGW_REDIS_WAIT_REPLICAS asks for. It is also ErrUnavailable: the
// client gets a 503 and may retry with the same token.
var ErrReplicas = fmt.Errorf("%w: replicas did not acknowledge the write", ErrUnavailable)

// QuorumError is the ErrUnavailable a Redlock returns when too many nodes
// failed, or are quarantined, for a majority to be possible. Its message is
// fit for a client: it names counts, not addresses, except NodeList, which
// the operator needs in every answer to act on it.
type QuorumError struct {
	Nodes       int // nodes in the Redlock
	Quorum      int // votes needed: Nodes/2 + 1
	Failed      int // nodes that did not answer in time
	Quarantined int // nodes that answered but are quarantined after a restart
	Refused     int // nodes that answered but refuse writes (ErrRefused)
	// NodeList, when not empty, says why nodes count for no one: they
	// serve another node list than this gateway's, or none yet
	// (redlock/nodeset.go). It names node addresses: it is for the operator.
	NodeList string
}

func (e *QuorumError) Error() string { return ErrUnavailable.Error() + ": " + e.QuorumDetail() }

// QuorumDetail says why no majority was possible, in words fit for a
// problem detail, naming each reason once: "3 of 5 Redlock nodes did not
// answer; a majority of 3 is impossible", "3 of 5 Redlock nodes are
// quarantined after a restart; …".
func (e *QuorumError) QuorumDetail() string {
	if e.NodeList != "" {
		return e.NodeList
	}
	var parts []string
	if e.Failed > 0 {
		parts = append(parts, fmt.Sprintf("%d did not answer", e.Failed))
	}
	if e.Quarantined > 0 {
		parts = append(parts, fmt.Sprintf("%d %s quarantined after a restart until every lease %s may have held has expired (see /readyz for when)",
			e.Quarantined, plural(e.Quarantined, "is", "are"), plural(e.Quarantined, "it", "they")))
	}
	if e.Refused > 0 {
		parts = append(parts, fmt.Sprintf("%d %s writes (out of memory, read-only or similar: see the node's log)", e.Refused, plural(e.Refused, "refuses", "refuse")))
	}
	if len(parts) == 0 {
		parts = append(parts, "0 did not answer")
	}
	// "3 did not answer" → "3 of 5 Redlock nodes did not answer".
	count, rest, _ := strings.Cut(parts[0], " ")
	parts[0] = fmt.Sprintf("%s of %d Redlock nodes %s", count, e.Nodes, rest)
	return strings.Join(parts, " and ") + fmt.Sprintf("; a majority of %d is impossible", e.Quorum)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Is makes errors.Is(err, ErrUnavailable) true, and errors.Is(err,
// ErrRefused) when nodes refusing writes are part of the reason.
func (e *QuorumError) Is(target error) bool {
	return target == ErrUnavailable || (target == ErrRefused && e.Refused > 0)
}

// Forced is err (ErrNotHeld or ErrTokenMismatch, what an extend found)
// marked ErrForced: errors.Is finds both.
func Forced(err error) error {
	return fmt.Errorf("%w (%w)", err, ErrForced)
}
