package lockstore

import (
	"context"
	"errors"
	"fmt"
)

// Forcer is a store that releases a lease without its token: an
// administrator's forced release of a lease whose holder crashed with a
// long TTL and whose token nobody can learn. Memory, Redis and Redlock
// implement it.
//
// A forced release is a release in every way but where the token's digest
// comes from: from the store's own read of the lease instead of from the
// caller. It reads the lease, then deletes only what it read (the value
// and expiry unchanged, on Redlock on each node: docs/safety.md, rules V2
// and G2), by the one code path Release takes. So a forced release that
// lands late deletes nothing a later grant, renewal or extend wrote, and
// the next holder's fence is above the released one's, as after any
// release.
type Forcer interface {
	// ForceRelease frees the lease that holds key: the one the store
	// reads, or, when fence is not 0, only a lease with that fence (as
	// Inspect reports it). It returns the lease released, without its
	// token. ErrNotHeld when there is no such lease to release: the key is
	// free, held with another fence than the one named, or the holder read
	// let go of it before it could be deleted (nothing was released).
	ForceRelease(ctx context.Context, key string, fence int64) (Lease, error)
	// SemForceRelease frees the permit with fence on key (permits held at
	// once never share a fence; SemInspect shows them), with the errors
	// of ForceRelease: ErrNotHeld when no permit of that fence is held.
	SemForceRelease(ctx context.Context, key string, fence int64) (Permit, error)
}

// CheckForce checks a ForceRelease's or a SemForceRelease's arguments: a
// key, and a fence that is not negative (0 for a lock: whichever lease
// holds it; a permit must name its fence).
func CheckForce(key string, fence int64, permit bool) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case fence < 0:
		return fmt.Errorf("%w: negative fence %d", ErrInvalid, fence)
	case permit && fence == 0:
		return fmt.Errorf("%w: a permit is named by its fence", ErrInvalid)
	}
	return nil
}

// ForcedErr is a forced release's answer for what a Release would answer
// ErrTokenMismatch: the holder it read let go of the key, and another
// holds it now. The lease it was to release is gone; nothing was released.
func ForcedErr(err error) error {
	if errors.Is(err, ErrTokenMismatch) {
		return fmt.Errorf("%w: the lease read ended before it was deleted, and another holds the key", ErrNotHeld)
	}
	return err
}
