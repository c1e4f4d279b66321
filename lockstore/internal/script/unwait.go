package script

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// LOCKGW_REDIS_WAIT_REPLICAS: a grant, a renewal or an extend is answered
// only once that many replicas acknowledged it (Redis WAIT), so that a
// replica Sentinel promotes after the master died has it. Without it,
// replication is asynchronous: the master can answer a grant and die before
// sending it on, the promoted replica has never seen the lease, and a
// second client gets the lock. What WAIT does not promise is in
// docs/safety.md ("WAIT").

var (
	//go:embed lua/unwait.lua
	unwaitLua    string
	UnwaitScript = redis.NewScript(unwaitLua)
)
