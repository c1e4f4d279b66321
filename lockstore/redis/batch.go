package redis

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

var _ lockstore.BatchExtender = (*Store)(nil)

// ExtendBatch implements BatchExtender: the extend scripts of exts in one
// pipeline, one round trip (pipelined). An extension the pipeline cannot
// settle alone (its lock counts against another user than the hint says)
// runs as a plain Extend, all of those at once.
func (s *Store) ExtendBatch(ctx context.Context, exts []lockstore.Extension) []lockstore.Extended {
	out := make([]lockstore.Extended, len(exts))
	start := time.Now()
	alone := s.pipelined(ctx, len(exts), func(pipe redis.Pipeliner, i int) *redis.Cmd {
		e := exts[i]
		if err := lockstore.CheckExtend(e.Key, e.Token, e.TTL); err != nil {
			out[i].Err = err
			return nil
		}
		keys, args := script.ExtendArgs{Digest: script.DigestHex(e.Token), TTL: e.TTL, Holder: script.EscapeUser(e.User)}.Call(e.Key)
		return pipe.EvalSha(ctx, script.ExtendScript.Hash(), keys, args...)
	}, func(i int, reply []any) (alone bool) {
		if _, ok := script.Elsewhere(reply, -2); ok {
			return true
		}
		v, err := script.ExtendReply(reply)
		if err != nil {
			out[i].Err = err
			return false
		}
		ttl := exts[i].TTL
		if ttl == 0 {
			ttl = v.Length
		}
		out[i].Lease = v.Lease(exts[i].Key, exts[i].Token, ttl, start)
		return false
	})
	lockstore.ExtendEach(ctx, s, exts, out, alone)
	return out
}

// pipelined sends the script calls of a batch of n in one pipeline, one
// round trip: call(pipe, i) queues i's (nil: none, the caller answered i
// already), and read(i, reply) reads its reply. It returns which to run
// alone, at once, with the store's own call: those read turns away, and
// those the pipeline could not settle (NOSCRIPT from a Redis that
// restarted or flushed its scripts, which the plain call loads; no
// answer, which it reports). On a Cluster (the keys live on several
// shards) or with replicas to wait for, it sends nothing and returns nil:
// all of them.
func (s *Store) pipelined(ctx context.Context, n int, call func(pipe redis.Pipeliner, i int) *redis.Cmd, read func(i int, reply []any) (alone bool)) []int {
	if s.onCluster() || s.acks.replicas > 0 {
		return nil
	}
	cmds := make([]*redis.Cmd, n)
	pipe := s.client.Pipeline()
	for i := range n {
		cmds[i] = call(pipe, i)
	}
	_, _ = pipe.Exec(ctx) // its error is the first failed command's; each is read below
	alone := make([]int, 0)
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		if reply, err := cmd.Slice(); err != nil || read(i, reply) {
			alone = append(alone, i)
		}
	}
	return alone
}
