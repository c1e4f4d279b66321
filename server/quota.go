package server

import (
	"fmt"
	"strconv"
)

// Caps on live locks (docs/rate-limiting.md, Quotas).
//
// Per user (LOCKGW_MAX_LOCKS_PER_USER): 10 000 by default, far above what
// one worker pool holds at once, yet it takes a hundred users at their cap
// to reach the memory backend's largest automatic bound. It is counted in
// the store (memory, redis), so it holds across gateways. Redlock does not
// count yet: auto is no cap there, and a cap is refused at start-up.
//
// In all (LOCKGW_MAX_LOCKS), for the memory backend only, whose locks live
// in the gateway's heap: one lock per lockBudget of the memory limit, at
// most about 6% of it, so that a client holding them all leaves the
// collector at its usual pace. Redis bounds its own memory (maxmemory: a
// full Redis answers 503 backend-refuses-writes).
const (
	defaultMaxLocksPerUser = 10_000
	// lockBytes is what a live lock of the memory backend costs the
	// gateway's heap, counted against a user, its hold-time metric
	// included: measured by BenchmarkGatewayLiveLock (docs/rate-limiting.md, Quotas).
	lockBytes    = 512
	lockBudget   = 8 << 10
	minLocks     = 1_000
	maxAutoLocks = 1_000_000
)

// setMaxLocksPerUser reads LOCKGW_MAX_LOCKS_PER_USER into c, whose backend
// is already set.
func setMaxLocksPerUser(c *Config, v string) error {
	switch n, err := strconv.Atoi(v); {
	case v == "auto" && c.Backend == BackendRedlock:
		c.MaxLocksPerUser = 0
	case v == "auto":
		c.MaxLocksPerUser = defaultMaxLocksPerUser
	case err != nil || n < 0:
		return fmt.Errorf("%q: want auto, 0 (no cap) or a whole number of locks", v)
	case n > 0 && c.Backend == BackendRedlock:
		return fmt.Errorf("%d: the redlock backend does not count locks per user yet; set 0 or auto (no cap)", n)
	default:
		c.MaxLocksPerUser = n
	}
	return nil
}

// setMaxLocks reads LOCKGW_MAX_LOCKS into c, whose backend is already set.
func setMaxLocks(c *Config, v string) error {
	switch n, err := strconv.Atoi(v); {
	case v == "auto":
	case err != nil || n < 1:
		return fmt.Errorf("%q: want auto or a whole number of at least 1", v)
	case c.Backend != BackendMemory:
		return fmt.Errorf("%d: only the memory backend keeps locks in the gateway; "+
			"bound Redis's memory with its maxmemory (with noeviction, a full Redis refuses new locks with 503)", n)
	default:
		c.MaxLocks = n
	}
	return nil
}

// resolveMaxLocks is the memory backend's bound on live locks: the setting,
// or with auto one per lockBudget of the memory limit, within the clamps.
// Other backends keep no locks in the gateway: 0.
func resolveMaxLocks(cfg Config, limit int64) int {
	switch {
	case cfg.Backend != BackendMemory:
		return 0
	case cfg.MaxLocks > 0:
		return cfg.MaxLocks
	}
	return int(min(max(limit/lockBudget, minLocks), maxAutoLocks))
}
