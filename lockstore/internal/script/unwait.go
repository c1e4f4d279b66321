package script

import (
	"context"
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
	UnwaitScript = redis.NewScript(DeadlineLua + unwaitLua) // rule D: clock.go
)

// Unwait takes back a grant of key the replicas did not acknowledge, if
// the lock is still value expiring at expiry (unwait.lua); quotaUser, when
// not "", is the user whose set counted it.
func Unwait(ctx context.Context, c Clocked, key, value string, expiry int64, quotaUser string) error {
	keys := []string{LockKey(key), QueueKey(key), FenceKey(key)}
	if quotaUser != "" {
		keys = append(keys, QuotaKey(quotaUser))
	}
	return RedisErr(UnwaitScript.Run(ctx, c, keys, value, expiry, Channel(key), FenceMargin.Milliseconds()).Err())
}

// SemUnwait is Unwait for a permit in slot (sem_unwait.lua).
func SemUnwait(ctx context.Context, c Clocked, key string, slot int, value, publish string) error {
	keys := []string{SemPermitsKey(key), SemExpiryKey(key), SemQueueKey(key)}
	return RedisErr(SemUnwaitScript.Run(ctx, c, keys, slot, value, SemChannel(key), publish).Err())
}
