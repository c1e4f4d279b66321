package redis

import (
	"context"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

var _ lockstore.BatchSemExtender = (*Store)(nil)

// SemExtendBatch implements BatchSemExtender: the sem_extend scripts of
// exts in one pipeline, one round trip, as ExtendBatch does for locks
// (pipelined).
func (s *Store) SemExtendBatch(ctx context.Context, exts []lockstore.Extension) []lockstore.SemExtended {
	out := make([]lockstore.SemExtended, len(exts))
	start := s.now()
	alone := s.pipelined(ctx, exts, func(i int, err error) { out[i].Err = err }, func(e lockstore.Extension) (string, []string, []any) {
		keys, args := script.SemExtendArgs(e.Key, script.DigestHex(e.Token), e.TTL, false, s.publish)
		return script.SemExtendScript.Hash(), keys, args
	}, func(i int, reply []any) (alone bool) {
		v, err := script.SemExtendReply(reply)
		if err != nil {
			out[i].Err = err
			return false
		}
		out[i].Permit = v.Permit(exts[i].Key, exts[i].Token, v.Limit, start)
		return false
	})
	lockstore.SemExtendEach(ctx, s, exts, out, alone)
	return out
}
