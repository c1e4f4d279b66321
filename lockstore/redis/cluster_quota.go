package redis

import (
	"context"
	_ "embed"
	"errors"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/redis/go-redis/v9"
)

// onCluster reports whether the store runs on a Redis Cluster.
func (s *Store) onCluster() bool { return s.publish == script.PublishShard }

type reserveCode int64

const (
	reserveAdded   reserveCode = 1
	reserveCounted reserveCode = 2
	reserveOver    reserveCode = 4
)

// clusterAcquire is acquire on a Cluster: see above.
func (s *Store) clusterAcquire(ctx context.Context, key string, a *script.AcquireArgs) (script.AcquireResult, error) {
	member := script.QuotaMember(key, a.Digest)
	var (
		set  string
		code reserveCode
		next time.Duration
	)
	if a.Quota.Max > 0 {
		set = script.QuotaKey(a.Quota.User)
		reply, err := script.QuotaReserve(ctx, s.client, set, member, a.Ttl, a.Quota.Max)
		if err != nil {
			return script.AcquireResult{}, err
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
		call.Quota.Max = -1
	}
	r, err := script.Acquire(ctx, s.clocked(s.client), key, call)
	if err != nil {
		// Whether the lock was taken is unknown: keep the place; it stops
		// counting when the lease it was reserved for would end.
		return r, err
	}
	added := code == reserveAdded
	switch r.Code {
	case script.AcquireOverQuota:
		r.CapErr.Max, r.CapErr.Next = a.Quota.Max, next
	case script.AcquireRenewed:
		// The lock counts against the user its grant recorded, if any;
		// only new grants are counted, so a renewal is not the caller's
		// lock unless it was already.
		switch user := r.Value.User; {
		case user == "":
		case set != "" && user == a.Quota.User:
			added = false // reserve moved its count, or counted it anew
		default:
			s.moveCount(ctx, script.QuotaKey(user), member, a.Ttl)
		}
	case script.AcquireNew:
		added = false // the place is the new lock's
	}
	if added {
		s.uncount(set, member)
	}
	return r, nil
}

// clusterExtend is Extend on a Cluster: see above.
func (s *Store) clusterExtend(ctx context.Context, key, token string, ttl time.Duration, start time.Time) (lockstore.Lease, error) {
	digest := script.DigestHex(token)
	member := script.QuotaMember(key, digest)
	moved := ""
	if hint := script.EscapeUser(lockstore.UserHint(ctx)); hint != "" && ttl > 0 {
		// First, so that a crash before the extend leaves the count
		// later than the lease, not earlier.
		s.moveCount(ctx, script.QuotaKey(hint), member, ttl)
		moved = hint
	}
	v, err := script.Extend(ctx, s.client, key, script.ExtendArgs{Digest: digest, TTL: ttl, QuotaApart: true})
	if err != nil {
		if moved != "" && (errors.Is(err, lockstore.ErrNotHeld) || errors.Is(err, lockstore.ErrTokenMismatch)) {
			// The token holds no lock here: whatever its count says is
			// stale.
			s.uncount(script.QuotaKey(moved), member)
		}
		return lockstore.Lease{}, err
	}
	if ttl == 0 {
		ttl = v.Length
	}
	if v.User != "" && (v.User != moved || moved == "") {
		s.moveCount(ctx, script.QuotaKey(v.User), member, ttl)
	}
	return v.Lease(key, token, ttl, start), nil
}

// moveCount sets when a counted lock stops counting: ttl from now. A lock
// its set no longer counts is left uncounted. A failure leaves the old
// time, which is all a failed step may cost (see above).
func (s *Store) moveCount(ctx context.Context, set, member string, ttl time.Duration) {
	_ = script.QuotaMove(ctx, s.client, set, member, ttl)
}

// uncount takes a lock out of its user's set, with a context of its own:
// the request's may be what ended. If it fails, the member stops counting
// when the lease it counted would have ended. It carries rule D's deadline
// (uncount.lua): a later grant to the same token counts the same member,
// and a removal landing after this request's answer would take that count
// away (found by review: a plain ZREM, sent again by the Cluster client or
// late, let a user hold one lock over its cap).
func (s *Store) uncount(set, member string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = script.Uncount(ctx, s.clocked(s.client), set, member)
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
