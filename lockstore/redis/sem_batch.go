package redis

import (
	"context"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/redis/go-redis/v9"
)

var _ lockstore.BatchSemExtender = (*Store)(nil)

// SemExtendBatch implements BatchSemExtender: the sem_extend scripts of
// exts in one pipeline, one round trip, as ExtendBatch does for locks. On
// a Cluster (the keys live on several shards) or with replicas to wait for,
// each runs as a plain SemExtend, all at once; so does one the pipeline
// could not settle (NOSCRIPT, no answer).
func (s *Store) SemExtendBatch(ctx context.Context, exts []lockstore.Extension) []lockstore.SemExtended {
	out := make([]lockstore.SemExtended, len(exts))
	if s.onCluster() || s.acks.replicas > 0 {
		lockstore.SemExtendEach(ctx, s, exts, out, nil)
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
		keys, args := script.SemExtendArgs(e.Key, script.DigestHex(e.Token), e.TTL, false, s.publish)
		cmds[i] = pipe.EvalSha(ctx, script.SemExtendScript.Hash(), keys, args...)
	}
	_, _ = pipe.Exec(ctx) // its error is the first failed command's; each is read below
	single := make([]int, 0)
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		reply, err := cmd.Slice()
		if err != nil {
			single = append(single, i)
			continue
		}
		v, err := script.SemExtendReply(reply)
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i].Permit = v.Permit(exts[i].Key, exts[i].Token, v.Limit, start)
	}
	lockstore.SemExtendEach(ctx, s, exts, out, single)
	return out
}
