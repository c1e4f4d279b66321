package script

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/window.lua
	windowLua    string
	WindowScript = redis.NewScript(windowLua)
)

func WindowKey(key string) string { return "lockgw:{" + key + "}:window" }
