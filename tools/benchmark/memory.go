package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// lockMemory is what Redis spends per held lock (row "memory", issue 17):
// -memory-locks leases with a one-hour TTL taken through a gateway of
// their own on a redis-server of their own, so that nothing else moves
// its used_memory.
type lockMemory struct {
	Locks   int64  `json:"locks"`   // held at the end of the fill
	Through string `json:"through"` // how the locks were taken
	// BytesPerLock is the growth of INFO memory's used_memory, less the
	// client connections' buffers (mem_clients_normal), per lock.
	BytesPerLock float64 `json:"bytes_per_lock"`
	// KeysPerLock is the growth of DBSIZE per lock.
	KeysPerLock float64 `json:"keys_per_lock"`
	// MemoryUsage is MEMORY USAGE … SAMPLES 0 of one lock's keys, by key:
	// the value, the key and Redis's per-key overhead, but not the main
	// dictionary's and the expiry dictionary's entries, which the
	// used_memory growth includes.
	MemoryUsage map[string]int64 `json:"memory_usage_one_lock"`
	// QuotaBytesPerLock is MEMORY USAGE of one user's quota set over its
	// members: what the per-user cap adds to each lock.
	QuotaBytesPerLock float64 `json:"quota_set_bytes_per_lock"`
	UsedBefore        int64   `json:"used_memory_before"`
	UsedAfter         int64   `json:"used_memory_after"`
	FillSeconds       float64 `json:"fill_seconds"`
	Note              string  `json:"note,omitempty"`
}

// memoryLocksPerUser is the memory row's per-user cap, twice the locks it
// gives each user (memoryUser).
const memoryLocksPerUser = 10_000

// memoryUser is the client address lock i is taken for: a new one every
// memoryLocksPerUser/2 locks.
func memoryUser(i int64) string {
	u := i / (memoryLocksPerUser / 2)
	return fmt.Sprintf("10.%d.%d.%d", u>>16&255, u>>8&255, u&255)
}

func (b *bench) lockMemory(ctx context.Context) (*lockMemory, error) {
	addr, err := b.startRedis("redis-memory")
	if err != nil {
		return nil, err
	}
	// The per-user cap stays on, as by default: each lock then also has
	// an entry in its user's quota set, which is part of what it costs.
	// The locks are spread over users (the client addresses a trusted
	// loopback proxy names) so that none reaches the cap.
	t, err := b.startGateway(ctx, "gateway (memory row)", "LOCKGW_BACKEND=redis", "LOCKGW_REDIS_URL=redis://"+addr+"/0",
		"LOCKGW_TRUSTED_PROXIES=127.0.0.1/32", "LOCKGW_MAX_LOCKS_PER_USER="+strconv.Itoa(memoryLocksPerUser))
	if err != nil {
		return nil, err
	}
	defer b.stopTarget(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer rdb.Close()

	// One lock first, so the gateway's connections and script cache are in
	// place before the "before" figure.
	held := &atomic.Int64{}
	if err := floodLocks(ctx, t.addr, "memory/warm", 1, held, memoryUser); err != nil || held.Load() != 1 {
		return nil, fmt.Errorf("first lock: %v (held %d)", err, held.Load())
	}
	before, err := usedMemory(ctx, rdb)
	if err != nil {
		return nil, err
	}
	keysBefore, err := rdb.DBSize(ctx).Result()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(b.stderr, "lockbench: 11  Redis memory: taking %s locks through the gateway", thousands(float64(b.cfg.memoryLocks)))
	held.Store(0)
	start := time.Now()
	if err := floodLocks(ctx, t.addr, "memory", b.cfg.memoryLocks, held, memoryUser); err != nil {
		fmt.Fprintln(b.stderr, ": failed")
		return nil, err
	}
	res := &lockMemory{Locks: held.Load(), Through: fmt.Sprintf("the gateway (Redis backend, per-user cap on, %d locks a user), 16 keep-alive connections", memoryLocksPerUser/2),
		FillSeconds: time.Since(start).Seconds(), UsedBefore: before, MemoryUsage: map[string]int64{}}
	if res.Locks == 0 {
		return nil, fmt.Errorf("no lock was granted")
	}
	if res.UsedAfter, err = usedMemory(ctx, rdb); err != nil {
		return nil, err
	}
	keysAfter, err := rdb.DBSize(ctx).Result()
	if err != nil {
		return nil, err
	}
	res.BytesPerLock = float64(res.UsedAfter-res.UsedBefore) / float64(res.Locks)
	res.KeysPerLock = float64(keysAfter-keysBefore) / float64(res.Locks)
	keys, err := rdb.Keys(ctx, "lockgw:{memory/1}:*").Result()
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		n, err := rdb.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			return nil, fmt.Errorf("MEMORY USAGE %s: %w", k, err)
		}
		res.MemoryUsage[k] = n
	}
	// One user's quota set: a member per lock of the user's.
	quotas, err := rdb.Keys(ctx, "lockgw:{quota:*").Result()
	if err != nil {
		return nil, err
	}
	if len(quotas) > 0 {
		n, err1 := rdb.MemoryUsage(ctx, quotas[0], 0).Result()
		members, err2 := rdb.ZCard(ctx, quotas[0]).Result()
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("MEMORY USAGE and ZCARD %s: %v %v", quotas[0], err1, err2)
		}
		if members > 0 {
			res.QuotaBytesPerLock = float64(n) / float64(members)
		}
	}
	if int(res.Locks) < b.cfg.memoryLocks {
		res.Note = fmt.Sprintf("only %d of %d locks were granted", res.Locks, b.cfg.memoryLocks)
	}
	fmt.Fprintf(b.stderr, ": %.0f bytes per lock (%s locks in %.1f s)\n", res.BytesPerLock, thousands(float64(res.Locks)), res.FillSeconds)
	return res, nil
}

// usedMemory is INFO memory's used_memory less mem_clients_normal: what
// the data set and its dictionaries take, without the client connections'
// buffers, which a fill through more or fewer connections would change.
func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO memory: %w", err)
	}
	f := infoFields(info)
	used, err1 := strconv.ParseInt(f["used_memory"], 10, 64)
	clients, err2 := strconv.ParseInt(f["mem_clients_normal"], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("INFO memory: no used_memory or mem_clients_normal")
	}
	return used - clients, nil
}

// infoFields splits an INFO reply into its name:value lines.
func infoFields(info string) map[string]string {
	out := map[string]string{}
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out
}
