package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgateway/lockgateway/internal/redistest"
)

// Node is a redistest.Server (kill, pause, restart, clock steps) with the
// one client the checkers read it through, whose short deadlines keep a
// paused node from stalling them.
type Node struct {
	*redistest.Server
	client *redis.Client
}

// StartNode starts a redis-server. With shim (from redistest.BuildClockShim)
// the node reads the wall clock through it, so SetClock can step it.
func StartNode(t testing.TB, shim string) *Node {
	t.Helper()
	return newNode(t, redistest.StartOptions(t, redistest.Options{ClockShim: shim}))
}

// newNode wraps a server started elsewhere (a Sentinel set-up's).
func newNode(t testing.TB, srv *redistest.Server) *Node {
	n := &Node{Server: srv}
	n.client = redis.NewClient(&redis.Options{
		Addr: n.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = n.client.Close() })
	return n
}

// Client is a go-redis client straight to the node, for the checkers and
// for faults that act on data (never through a gateway's proxy).
func (n *Node) Client() *redis.Client { return n.client }

// Time is the node's clock, from Redis TIME.
func (n *Node) Time(ctx context.Context) (time.Time, error) {
	return n.client.Time(ctx).Result()
}

// JumpKeys emulates a forward step of a node's clock by d on the keys
// matching pattern: each key with a TTL loses d of it, and is gone when it
// had less. That is what a step does to expiry; unlike SetClock it needs no
// shim and can be aimed at one lease, but it leaves Redis TIME alone.
func JumpKeys(ctx context.Context, c *redis.Client, pattern string, d time.Duration) error {
	const script = `
local gone = 0
for _, k in ipairs(redis.call('KEYS', ARGV[2])) do
  local p = redis.call('PTTL', k)
  if p > 0 then
    if p <= tonumber(ARGV[1]) then
      redis.call('DEL', k)
      gone = gone + 1
    else
      redis.call('PEXPIRE', k, p - tonumber(ARGV[1]))
    end
  end
end
return gone`
	return c.Eval(ctx, script, nil, d.Milliseconds(), pattern).Err()
}
