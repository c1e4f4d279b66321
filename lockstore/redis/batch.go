package redis

import (
	"context"

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
	start := s.now()
	alone := s.pipelined(ctx, exts, func(i int, err error) { out[i].Err = err }, func(e lockstore.Extension) (string, []string, []any) {
		keys, args := script.ExtendArgs{Digest: script.DigestHex(e.Token), TTL: e.TTL, Holder: script.EscapeUser(e.User)}.Call(e.Key)
		return script.ExtendScript.Hash(), keys, args
	}, func(i int, reply []any) (alone bool) {
		if _, ok := script.Elsewhere(reply, -2); ok {
			return true
		}
		v, err := script.ExtendReply(reply)
		if err != nil {
			out[i].Err = err
			return false
		}
		s.known.remember(exts[i].Key, v)
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

// pipelined sends the extend scripts of exts in one pipeline, one round
// trip: call names an extension's script (its SHA1) and its KEYS and ARGV,
// and read reads its reply; an extension the arguments' check refuses is
// not sent, failed says why. It returns which to run alone, at once, with
// the store's own call: those read turns away, and those the pipeline
// could not settle (NOSCRIPT from a Redis that restarted or flushed its
// scripts, which the plain call loads; no answer, which it reports). On a
// Cluster (the keys live on several shards) or with replicas to wait for,
// it sends nothing and returns nil: all of them.
func (s *Store) pipelined(ctx context.Context, exts []lockstore.Extension, failed func(i int, err error),
	call func(e lockstore.Extension) (sha string, keys []string, args []any), read func(i int, reply []any) (alone bool),
) []int {
	if s.onCluster() || s.acks.replicas > 0 {
		return nil
	}
	cmds := make([]*redis.Cmd, len(exts))
	pipe := s.client.Pipeline()
	for i, e := range exts {
		if err := lockstore.CheckExtend(e.Key, e.Token, e.TTL); err != nil {
			failed(i, err)
			continue
		}
		sha, keys, args := call(e)
		cmds[i] = pipe.EvalSha(ctx, sha, keys, args...)
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
