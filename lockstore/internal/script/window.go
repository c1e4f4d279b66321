package script

import (
	"context"
	_ "embed"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/window.lua
	windowLua    string
	WindowScript = redis.NewScript(windowLua)
)

func WindowKey(key string) string { return "lockgw:{" + key + "}:window" }

// TakeWindow runs window.lua: id takes key's rate-limit window for window,
// or learns how long the window another id holds has left (0: taken).
func TakeWindow(ctx context.Context, c redis.Scripter, key, id string, window time.Duration) (time.Duration, error) {
	ms, err := WindowScript.Run(ctx, c, []string{WindowKey(key)}, id, window.Milliseconds()).Int64()
	if err != nil {
		return 0, RedisErr(err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
