package lockstore

import (
	"context"
	"fmt"
)

// Quota caps the live locks one user may hold. A user is whatever the
// caller counts by (the gateway: an API key's user, or the client identity
// its rate limiter uses); the store records it with each lock it grants
// under a quota, and the lock counts against that user until it is
// released or expires, whoever releases or extends it.
//
// Only new grants are counted: a same-token renewal of a lock the user
// already holds is not a second lock, and a lock granted without a quota
// counts against nobody.
type Quota struct {
	User string
	// Max is the most live locks User may hold; 0 is no cap (and no
	// counting).
	Max int
}

type userKey struct{}

// WithUser tells a store that counts locks per user who is probably
// extending or releasing: the user a lock most likely counts against. The
// Redis store then finds the count in one round trip. A hint that is wrong
// or missing costs one more round trip, never a wrong count: the store
// knows whom each lock counts against.
func WithUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, userKey{}, user)
}

func UserHint(ctx context.Context) string {
	u, _ := ctx.Value(userKey{}).(string)
	return u
}

// CheckQuota checks an AcquireRequest's Quota, for the stores that count
// (a store that cannot refuses any quota with ErrInvalid).
func CheckQuota(q Quota) error {
	if q.Max < 0 || (q.Max > 0 && q.User == "") {
		return fmt.Errorf("%w: a quota needs a user and a cap of at least 1", ErrInvalid)
	}
	return nil
}
