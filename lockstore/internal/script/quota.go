package script

import (
	"context"
	_ "embed"
	"time"

	"github.com/redis/go-redis/v9"
)

// Quotas on a Redis Cluster. A user's quota set and a lock hash to
// different slots, often on different shards, so no one script can change
// both, as it does on a single Redis. Instead each change is two scripts,
// ordered so that a gateway that dies between them leaves the count too
// high for a while, never too low:
//
//   - acquire: reserve a place in the user's set (quota.lua: refused at the
//     cap), then take the lock (acquire.lua, which records the user in the
//     lock's value); a definite refusal (held, over quota) gives the place
//     back. A reservation whose acquire never answered (timeout, crash) is
//     kept: it stops counting when the lease it reserved for would end.
//   - extend: move the lock's count in the hinted user's set first, then
//     extend; a wrong or missing hint moves the right user's count after.
//   - release: delete the lock, then its count; a count left behind by a
//     crash stops counting when the lease would have ended.
//
// One order cannot be kept: a renewal or an extend of a lock that counts
// against another user than the caller's (the same token used under
// another identity, or an extend without the user hint) learns that user
// from the script's reply, so it moves the count after the lease. A
// gateway that dies in between leaves that count ending before the lease:
// that user may then take one lock over the cap until the lease ends.
//
// A member counts until its lease's end as the set's node measures it from
// the reservation, which comes a round trip before the grant: the count of
// a lock that runs to its end stops that much (plus any clock difference
// between the two nodes) before the lease does.
var (
	//go:embed lua/quota.lua
	quotaLua    string
	QuotaScript = redis.NewScript(quotaLua)

	//go:embed lua/uncount.lua
	uncountLua    string
	UncountScript = redis.NewScript(DeadlineLua + uncountLua) // rule D: clock.go
)

// quotaMember names a lock in its user's set on a Cluster: the token's
// digest too, so that two attempts of one user on one key (two tokens)
// count apart, and the one that fails gives back only its own place.
func QuotaMember(key, digest string) string { return LockKey(key) + "#" + digest }

// QuotaReserve reserves member's place in set (quota.lua "reserve") for
// ttl, refused at max: the script's reply, code first (see its header).
func QuotaReserve(ctx context.Context, c redis.Scripter, set, member string, ttl time.Duration, max int) ([]any, error) {
	reply, err := QuotaScript.Run(ctx, c, []string{set}, "reserve", member, ttl.Milliseconds(), max).Slice()
	return reply, RedisErr(err)
}

// Uncount takes member out of set (uncount.lua), before c's call is
// answered or not at all (rule D).
func Uncount(ctx context.Context, c Clocked, set, member string) error {
	return RedisErr(UncountScript.Run(ctx, c, []string{set}, member).Err())
}

// QuotaMove sets when member stops counting in set: ttl from now (quota.lua
// "move"); a member the set no longer counts is left out.
func QuotaMove(ctx context.Context, c redis.Scripter, set, member string, ttl time.Duration) error {
	return RedisErr(QuotaScript.Run(ctx, c, []string{set}, "move", member, ttl.Milliseconds()).Err())
}
