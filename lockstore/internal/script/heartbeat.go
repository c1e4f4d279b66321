package script

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/sem_heartbeat.lua
	semHeartbeatLua    string
	SemHeartbeatScript = redis.NewScript(SemCommonLua + semHeartbeatLua)
)

var (
	//go:embed lua/heartbeat.lua
	heartbeatLua    string
	HeartbeatScript = redis.NewScript(heartbeatLua)
)
