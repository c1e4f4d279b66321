package scripttest

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// BeforeScript runs Hook before the first call of one script (by its
// Sha) that goes through it, and counts the calls: a forced release's
// delete, staged to land after a write that came between its read and it.
type BeforeScript struct {
	redis.Scripter
	Sha   string
	Hook  func()
	Calls *atomic.Int64
}

func (b BeforeScript) before(sha string) {
	if sha == b.Sha && b.Calls.Add(1) == 1 {
		b.Hook()
	}
}

func (b BeforeScript) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	b.before(sha)
	return b.Scripter.EvalSha(ctx, sha, keys, args...)
}

func (b BeforeScript) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return b.Scripter.Eval(ctx, script, keys, args...) // after a NOSCRIPT: EvalSha counted it
}
