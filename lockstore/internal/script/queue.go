package script

// The wait queue's scripts: a gateway's heartbeat for its waiters of a key
// (heartbeat.lua, sem_heartbeat.lua), and a waiter leaving the line
// (leave.lua, sem_leave.lua). acquire.lua and sem_acquire.lua queue a waiter
// (AcquireArgs.Ticket, SemArgs.Ticket).

import (
	"context"
	_ "embed"
	"fmt"
	"time"

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

// Heartbeat runs heartbeat.lua for gateway's waiters of key, oldest its
// oldest ticket: it refreshes their place in the queue (for heartbeat) and
// answers the first ticket, whether the lock is free (no lease: PTTL -2)
// and whether oldest is still queued.
func Heartbeat(ctx context.Context, c redis.Scripter, key, gateway string, heartbeat time.Duration, oldest string) (head string, free, queued bool, err error) {
	keys := []string{LockKey(key), QueueKey(key), AliveKey(key)}
	reply, err := HeartbeatScript.Run(ctx, c, keys, gateway, heartbeat.Milliseconds(), oldest).Slice()
	if err != nil {
		return "", false, false, RedisErr(err)
	}
	if len(reply) != 3 {
		return "", false, false, fmt.Errorf("lockstore: heartbeat script replied %v", reply)
	}
	head, _ = reply[0].(string)
	pttl, _ := reply[1].(int64)
	return head, pttl == -2, reply[2] == int64(1), nil
}

// SemHeartbeat runs sem_heartbeat.lua for gateway's waiters of the
// semaphore key: its reply as the script gives it (see its header), which
// the caller reads.
func SemHeartbeat(ctx context.Context, c redis.Scripter, key, gateway string, heartbeat time.Duration, oldest string) ([]any, error) {
	keys := []string{SemPermitsKey(key), SemExpiryKey(key), SemQueueKey(key), SemAliveKey(key)}
	reply, err := SemHeartbeatScript.Run(ctx, c, keys, gateway, heartbeat.Milliseconds(), oldest).Slice()
	return reply, RedisErr(err)
}

// Leave takes the waiter id out of key's queue (leave.lua), telling the
// next waiter if id was first.
func Leave(ctx context.Context, c redis.Scripter, key, id, publish string) error {
	return RedisErr(LeaveScript.Run(ctx, c, []string{LockKey(key), QueueKey(key), AliveKey(key)}, id, Channel(key), publish).Err())
}

// SemLeave is Leave for a semaphore's queue (sem_leave.lua).
func SemLeave(ctx context.Context, c redis.Scripter, key, id, publish string) error {
	return RedisErr(SemLeaveScript.Run(ctx, c, []string{SemQueueKey(key), SemAliveKey(key)}, id, SemChannel(key), publish).Err())
}
