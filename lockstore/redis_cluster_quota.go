package lockstore

import (
	"context"
	_ "embed"
	"errors"
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
	quotaScript = redis.NewScript(quotaLua)
)

// onCluster reports whether the store runs on a Redis Cluster.
func (s *Redis) onCluster() bool { return s.publish == publishShard }

// quotaMember names a lock in its user's set on a Cluster: the token's
// digest too, so that two attempts of one user on one key (two tokens)
// count apart, and the one that fails gives back only its own place.
func quotaMember(key, digest string) string { return lockKey(key) + "#" + digest }

type reserveCode int64

const (
	reserveAdded   reserveCode = 1
	reserveCounted reserveCode = 2
	reserveOver    reserveCode = 4
)

// clusterAcquire is acquire on a Cluster: see above.
func (s *Redis) clusterAcquire(ctx context.Context, key string, a *acquireArgs) (acquireResult, error) {
	member := quotaMember(key, a.digest)
	var (
		set  string
		code reserveCode
		next time.Duration
	)
	if a.quota.max > 0 {
		set = quotaKey(a.quota.user)
		reply, err := quotaScript.Run(ctx, s.client, []string{set}, "reserve", member, a.ttl.Milliseconds(), a.quota.max).Slice()
		if err != nil {
			return acquireResult{}, redisErr(err)
		}
		c, _ := reply[0].(int64)
		code = reserveCode(c)
		if code == reserveOver && len(reply) == 2 {
			ms, _ := reply[1].(int64)
			next = time.Duration(ms) * time.Millisecond
		}
	}
	call := *a
	if code == reserveOver {
		// At the cap: the key may still be held (then it is ErrHeld, and
		// a waiter keeps its place in the queue) or be the caller's own
		// lock to renew; only a new grant is refused.
		call.quota.max = -1
	}
	r, err := nodeAcquire(ctx, s.grants(s.client), key, call)
	if err != nil {
		// Whether the lock was taken is unknown: keep the place; it stops
		// counting when the lease it was reserved for would end.
		return r, err
	}
	added := code == reserveAdded
	switch r.code {
	case acquireOverQuota:
		r.capErr.Max, r.capErr.Next = a.quota.max, next
	case acquireRenewed:
		// The lock counts against the user its grant recorded, if any;
		// only new grants are counted, so a renewal is not the caller's
		// lock unless it was already.
		switch user := r.value.user; {
		case user == "":
		case set != "" && user == a.quota.user:
			added = false // reserve moved its count, or counted it anew
		default:
			s.moveCount(ctx, quotaKey(user), member, a.ttl)
		}
	case acquireNew:
		added = false // the place is the new lock's
	}
	if added {
		s.uncount(set, member)
	}
	return r, nil
}

// clusterExtend is Extend on a Cluster: see above.
func (s *Redis) clusterExtend(ctx context.Context, key, token string, ttl time.Duration, start time.Time) (Lease, error) {
	digest := digestHex(token)
	member := quotaMember(key, digest)
	moved := ""
	if hint := escapeUser(userHint(ctx)); hint != "" && ttl > 0 {
		// First, so that a crash before the extend leaves the count
		// later than the lease, not earlier.
		s.moveCount(ctx, quotaKey(hint), member, ttl)
		moved = hint
	}
	reply, err := extendScript.Run(ctx, s.client, []string{lockKey(key)}, digest, ttl.Milliseconds(), "", "1").Slice()
	if err != nil {
		return Lease{}, redisErr(err)
	}
	v, err := extendReply(reply)
	if err != nil {
		if moved != "" && (errors.Is(err, ErrNotHeld) || errors.Is(err, ErrTokenMismatch)) {
			// The token holds no lock here: whatever its count says is
			// stale.
			s.uncount(quotaKey(moved), member)
		}
		return Lease{}, err
	}
	if ttl == 0 {
		ttl = v.length
	}
	if v.user != "" && (v.user != moved || moved == "") {
		s.moveCount(ctx, quotaKey(v.user), member, ttl)
	}
	return v.lease(key, token, ttl, start), nil
}

// moveCount sets when a counted lock stops counting: ttl from now. A lock
// its set no longer counts is left uncounted. A failure leaves the old
// time, which is all a failed step may cost (see above).
func (s *Redis) moveCount(ctx context.Context, set, member string, ttl time.Duration) {
	_ = quotaScript.Run(ctx, s.client, []string{set}, "move", member, ttl.Milliseconds()).Err()
}

// uncount takes a lock out of its user's set, with a context of its own:
// the request's may be what ended. If it fails, the member stops counting
// when the lease it counted would have ended.
func (s *Redis) uncount(set, member string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.client.ZRem(ctx, set, member).Err()
}

// reloadOnFailure has a Cluster client reload its slot map (in the
// background, at most every 200 ms) when a command could not reach its
// node. go-redis reloads the map by itself only on a MOVED or ASK reply,
// or once a minute: after a master died and its replica took over, nobody
// answers MOVED for the dead master's slots, and they would stay
// unreachable for up to a minute.
type reloadOnFailure struct{ c *redis.ClusterClient }

func (h reloadOnFailure) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnFailure) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(ctx, err)
		return err
	}
}

func (h reloadOnFailure) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.check(ctx, err)
		return err
	}
}

// check reloads on an error that is not a reply: a refused or broken
// connection, a timeout (a reply, even CLUSTERDOWN, came from a node that
// answers).
func (h reloadOnFailure) check(ctx context.Context, err error) {
	var reply redis.Error
	if err != nil && !errors.As(err, &reply) && !errors.Is(err, context.Canceled) {
		h.c.ReloadState(ctx)
	}
}
