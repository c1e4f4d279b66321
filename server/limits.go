package server

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/rs/zerolog"
)

// What one of each costs the gateway in memory, measured with make bench's
// flood rows (docs/operations.md, Memory and bounds): an idle keep-alive connection (a goroutine
// and its read and write buffers), and what a waiting acquire adds to its
// connection.
const (
	connBytes        = 20 << 10
	waiterExtraBytes = 16 << 10
)

// With "auto", one connection per connBudget of the memory limit and one
// waiting acquire per waiterBudget, within the clamps: together at most
// about 40% of the limit, so a client that fills both leaves the heap well
// below it and the collector at its usual pace.
const (
	connBudget   = 64 << 10
	waiterBudget = 256 << 10
	minConns     = 64
	maxConns     = 10000
	minWaiting   = 16
	maxWaiting   = 1024
)

// bounds are what one client can make the gateway hold.
type bounds struct {
	maxConns   int
	maxWaiting int
	maxLocks   int // memory backend only (quota.go)
}

// resolveBounds fills in the "auto" bounds from the memory limit, and
// refuses bounds set by hand that could hold more than half of it: past
// that, a client that fills them puts the collector to work nonstop.
func resolveBounds(cfg Config, limit int64) (bounds, error) {
	b := bounds{maxConns: cfg.MaxConns, maxWaiting: cfg.MaxWaiting}
	if b.maxConns == 0 {
		b.maxConns = int(min(max(limit/connBudget, minConns), maxConns))
	}
	if b.maxWaiting == 0 {
		b.maxWaiting = int(min(max(limit/waiterBudget, minWaiting), maxWaiting))
	}
	b.maxLocks = resolveMaxLocks(cfg, limit)
	if (cfg.MaxConns == 0 && cfg.MaxWaiting == 0 && cfg.MaxLocks == 0) || limit == math.MaxInt64 {
		return b, nil
	}
	held := int64(b.maxConns)*connBytes + int64(b.maxWaiting)*waiterExtraBytes + int64(b.maxLocks)*lockBytes
	if held > limit/2 {
		return b, fmt.Errorf("%d connections (LOCKGW_MAX_CONNS), %d waiting acquires (LOCKGW_MAX_WAITING) and %d locks (LOCKGW_MAX_LOCKS) can hold about %s, "+
			"more than half the memory limit of %s, where the garbage collector would run nonstop: lower them, or raise LOCKGW_MEMORY_LIMIT",
			b.maxConns, b.maxWaiting, b.maxLocks, formatBytes(held), formatBytes(limit))
	}
	return b, nil
}

// setLimits decides the memory policy and the bounds, applies the policy
// to the process (GOGC follows the live heap until ctx ends) and logs both.
func setLimits(ctx context.Context, cfg Config, getenv func(string) string, log zerolog.Logger) (bounds, error) {
	mem, err := hostMemory.choose(cfg.MemoryLimit, getenv)
	if err != nil {
		return bounds{}, fmt.Errorf("memory limit: %w", err)
	}
	b, err := resolveBounds(cfg, mem.limit)
	if err != nil {
		return bounds{}, err
	}
	mem.apply()
	gogc := fmt.Sprintf("%d to %d, by the live heap", minGCPercent, defaultGCPercent)
	if mem.gcPercent > 0 {
		go tuneGC(ctx, time.Second)
	} else {
		gogc = getenv("GOGC") + " (GOGC)"
	}
	log.Info().
		Str("memory_limit", formatBytes(mem.limit)).
		Str("memory_limit_from", mem.source).
		Str("gogc", gogc).
		Int("max_conns", b.maxConns).
		Int("max_waiting", b.maxWaiting).
		Int("max_locks", b.maxLocks).
		Int("max_locks_per_user", cfg.MaxLocksPerUser).
		Str("idle_timeout", cfg.IdleTimeout.String()).
		Msg("limits")
	return b, nil
}
