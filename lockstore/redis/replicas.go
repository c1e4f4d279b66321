package redis

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"slices"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/redis/go-redis/v9"
)

// replicaAcks is how many replicas must acknowledge a write, and the
// longest the gateway waits for them (the backend timeout).
type replicaAcks struct {
	replicas int // 0: answer without waiting
	timeout  time.Duration
}

// conn is a connection of the client's own: WAIT waits for the writes of
// the connection it is sent on, so the script and WAIT must share one.
// OpenRedis turns WAIT on only for a single Redis or Sentinel, whose client
// is a *redis.Client.
func (s *Store) conn() (*redis.Conn, error) {
	c, ok := s.client.(*redis.Client)
	if !ok {
		return nil, fmt.Errorf("lockstore: LOCKGW_REDIS_WAIT_REPLICAS needs a single Redis or Sentinel, not a %T", s.client)
	}
	return c.Conn(), nil
}

// acquireAcked runs acquire.lua; with replicas to wait for, it answers a
// grant or renewal only once they acknowledged it. A new grant they did not
// acknowledge is taken back (unwait.lua) before the caller hears 503, so no
// lease is left that nobody was told about. A renewal is left as it is:
// the caller held the lease before this call, and deleting it would take
// away what it was already told it holds, on a 503 that says "outcome
// unknown" (a master that keeps it a little longer costs others a wait, no
// more).
func (s *Store) acquireAcked(ctx context.Context, key string, a script.AcquireArgs) (script.AcquireResult, error) {
	if s.acks.replicas == 0 {
		return script.Acquire(ctx, s.clocked(s.scripts), key, a)
	}
	conn, err := s.conn()
	if err != nil {
		return script.AcquireResult{}, err
	}
	defer conn.Close()
	keys, args := a.Call(key)
	var reply *redis.Cmd
	var expiry *redis.Cmd
	for try := 0; ; try++ {
		// Rule D (script/clock.go): the grant's deadline, sampled on this
		// connection's server.
		deadline, giveUp, err := s.clocks.Deadline(ctx, conn, script.LockKey(key))
		if err != nil {
			return script.AcquireResult{}, err
		}
		// The lock's expiry, read in the same MULTI as the grant, is what
		// tells the grant's own lease from the same token's renewal later
		// (unwait.lua).
		_, err = conn.TxPipelined(ctx, func(p redis.Pipeliner) error {
			reply = script.AcquireScript.EvalSha(ctx, p, keys, append(slices.Clip(args), deadline)...)
			// Do: go-redis's PExpireTime turns the reply into a Duration.
			expiry = p.Do(ctx, "PEXPIRETIME", script.LockKey(key))
			return nil
		})
		// An EVALSHA that found no script (a Redis restarted, or a new
		// master after a failover) ran nothing; Redis queues it and answers
		// NOSCRIPT in its place in EXEC's reply. Load the script and send
		// the MULTI again; the PEXPIRETIME of the first one changed nothing.
		// Neither did a grant that reached another server than the one
		// sampled: sample again and send it again.
		if try < 2 && (redis.HasErrorPrefix(reply.Err(), "NOSCRIPT") || redis.HasErrorPrefix(err, "NOSCRIPT")) {
			if err = script.AcquireScript.Load(ctx, conn).Err(); err != nil {
				return script.AcquireResult{}, script.RedisErr(err)
			}
			continue
		}
		if try < 2 && script.IsReply(reply.Err(), script.ClockReply) {
			s.clocks.Forget(script.LockKey(key))
			continue
		}
		s.clocks.Settle(cmp.Or(err, reply.Err()), giveUp)
		break
	}
	if err = reply.Err(); err != nil {
		return script.AcquireResult{}, script.RedisErr(err)
	}
	list, err := reply.Slice()
	if err != nil {
		return script.AcquireResult{}, script.RedisErr(err)
	}
	r, err := script.AcquireReply(list, a)
	if err != nil || (r.Code != script.AcquireNew && r.Code != script.AcquireRenewed) {
		return r, err
	}
	if err := s.acks.await(ctx, conn); err != nil {
		if r.Code == script.AcquireNew {
			value, _ := list[1].(string)
			at, _ := expiry.Int64()
			s.unwait(ctx, key, a, value, at)
		}
		return script.AcquireResult{}, err
	}
	return r, nil
}

// unwait takes back a new grant the replicas did not acknowledge, if the
// lock is still exactly what it left. The caller's deadline may have run
// out waiting, so it gets a backend timeout of its own. When it cannot run
// (the master died), the grant is left to its TTL: a lease nobody was told
// it holds, which costs others a wait and breaks nothing.
func (s *Store) unwait(ctx context.Context, key string, a script.AcquireArgs, value string, expiry int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.acks.timeout)
	defer cancel()
	counted := ""
	if a.Quota.Max > 0 { // the grant counted the lock in its caller's set
		counted = a.Quota.User
	}
	_ = script.Unwait(ctx, s.clocked(s.client), key, value, expiry, counted)
}

// extendAcked runs extend.lua; with replicas to wait for, it answers an
// extend only once they acknowledged it. An extend they did not acknowledge
// is left as it is: the caller held the lease before this call, and an
// extend that failed must neither delete nor shorten it (the master keeping
// it longer costs others a wait). The errors are the domain's.
func (s *Store) extendAcked(ctx context.Context, key string, a script.ExtendArgs) ([]any, error) {
	keys, args := a.Call(key)
	if s.acks.replicas == 0 {
		reply, err := script.ExtendScript.Run(ctx, s.scripts, keys, args...).Slice()
		return reply, script.RedisErr(err)
	}
	conn, err := s.conn()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	reply, err := script.ExtendScript.Run(ctx, conn, keys, args...).Slice()
	if err != nil {
		return nil, script.RedisErr(err)
	}
	if len(reply) > 0 && reply[0] == int64(1) {
		if err := s.acks.await(ctx, conn); err != nil {
			return nil, err
		}
	}
	return reply, nil
}

// await sends WAIT on conn, after a write on it, bounded by the backend
// timeout and by ctx's deadline (less a tenth, for the reply to come back
// before the connection's own deadline cuts it off).
func (w replicaAcks) await(ctx context.Context, conn *redis.Conn) error {
	bound := w.timeout
	if deadline, ok := ctx.Deadline(); ok {
		bound = min(bound, time.Until(deadline))
	}
	bound -= bound / 10
	if bound < time.Millisecond { // WAIT 0 would wait for ever
		return fmt.Errorf("%w: no time was left to wait for %d of them (LOCKGW_REDIS_WAIT_REPLICAS); raise LOCKGW_BACKEND_TIMEOUT", lockstore.ErrReplicas, w.replicas)
	}
	n, err := conn.Wait(ctx, w.replicas, bound).Result()
	switch {
	case err != nil:
		return fmt.Errorf("%w: WAIT for %d of them within %v got no answer (%w)", lockstore.ErrReplicas, w.replicas, bound, err)
	case int(n) < w.replicas:
		return fmt.Errorf("%w: %d of %d replicas did within %v (LOCKGW_REDIS_WAIT_REPLICAS); check the replicas' links to the master (INFO replication on it), or lower LOCKGW_REDIS_WAIT_REPLICAS", lockstore.ErrReplicas, n, w.replicas, bound)
	}
	return nil
}
