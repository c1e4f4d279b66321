package lockstore

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var _ BatchExtender = (*Redis)(nil)

// ExtendBatch implements BatchExtender: the extend scripts of exts in one
// pipeline, one round trip. An extension the pipeline cannot settle alone
// (its lock counts against another user than the hint says, a Cluster,
// whose quota counts move in steps of their own, or replicas to wait for)
// runs as a plain Extend, all of those at once.
func (s *Redis) ExtendBatch(ctx context.Context, exts []Extension) []Extended {
	out := make([]Extended, len(exts))
	single := make([]int, 0)
	if s.onCluster() || s.acks.replicas > 0 {
		for i := range exts {
			single = append(single, i)
		}
		s.extendEach(ctx, exts, out, single)
		return out
	}
	start := time.Now()
	cmds := make([]*redis.Cmd, len(exts))
	pipe := s.client.Pipeline()
	for i, e := range exts {
		if err := checkExtend(e.Key, e.Token, e.TTL); err != nil {
			out[i].Err = err
			continue
		}
		keys := quotaKeys([]string{lockKey(e.Key)}, escapeUser(e.User))
		cmds[i] = pipe.EvalSha(ctx, extendScript.Hash(), keys, digestHex(e.Token), e.TTL.Milliseconds())
	}
	if _, err := pipe.Exec(ctx); err != nil && !redis.HasErrorPrefix(err, "NOSCRIPT") {
		// Exec's error is the first failed command's; each is read below.
		_ = err
	}
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
		if _, ok := elsewhere(reply, -2); ok {
			single = append(single, i)
			continue
		}
		v, err := extendReply(reply)
		if err != nil {
			out[i].Err = err
			continue
		}
		ttl := exts[i].TTL
		if ttl == 0 {
			ttl = v.length
		}
		out[i].Lease = v.lease(exts[i].Key, exts[i].Token, ttl, start)
	}
	s.extendEach(ctx, exts, out, single)
	return out
}

// extendEach runs Extend for exts[i], i in which, at once.
func (s *Redis) extendEach(ctx context.Context, exts []Extension, out []Extended, which []int) {
	var wg sync.WaitGroup
	for _, i := range which {
		wg.Go(func() {
			e := exts[i]
			ectx := ctx
			if e.User != "" {
				ectx = WithUser(ctx, e.User)
			}
			out[i].Lease, out[i].Err = s.Extend(ectx, e.Key, e.Token, e.TTL)
		})
	}
	wg.Wait()
}
