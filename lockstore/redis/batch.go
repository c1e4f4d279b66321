package redis

import (
	"context"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/redis/go-redis/v9"
)

var _ lockstore.BatchExtender = (*Store)(nil)

// ExtendBatch implements BatchExtender: the extend scripts of exts in one
// pipeline, one round trip. An extension the pipeline cannot settle alone
// (its lock counts against another user than the hint says, a Cluster,
// whose quota counts move in steps of their own, or replicas to wait for)
// runs as a plain Extend, all of those at once.
func (s *Store) ExtendBatch(ctx context.Context, exts []lockstore.Extension) []lockstore.Extended {
	out := make([]lockstore.Extended, len(exts))
	single := make([]int, 0)
	if s.onCluster() || s.acks.replicas > 0 {
		for i := range exts {
			single = append(single, i)
		}
		lockstore.ExtendEach(ctx, s, exts, out, single)
		return out
	}
	start := time.Now()
	cmds := make([]*redis.Cmd, len(exts))
	pipe := s.client.Pipeline()
	for i, e := range exts {
		if err := lockstore.CheckExtend(e.Key, e.Token, e.TTL); err != nil {
			out[i].Err = err
			continue
		}
		keys := script.QuotaKeys([]string{script.LockKey(e.Key)}, script.EscapeUser(e.User))
		cmds[i] = pipe.EvalSha(ctx, script.ExtendScript.Hash(), keys, script.DigestHex(e.Token), e.TTL.Milliseconds())
	}
	_, _ = pipe.Exec(ctx) // its error is the first failed command's; each is read below
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		reply, err := cmd.Slice()
		if err != nil {
			// NOSCRIPT (a Redis that restarted or flushed its scripts), or
			// one that did not answer: Extend loads the script or says so.
			single = append(single, i)
			continue
		}
		if _, ok := script.Elsewhere(reply, -2); ok {
			single = append(single, i)
			continue
		}
		v, err := script.ExtendReply(reply)
		if err != nil {
			out[i].Err = err
			continue
		}
		ttl := exts[i].TTL
		if ttl == 0 {
			ttl = v.Length
		}
		out[i].Lease = v.Lease(exts[i].Key, exts[i].Token, ttl, start)
	}
	lockstore.ExtendEach(ctx, s, exts, out, single)
	return out
}
