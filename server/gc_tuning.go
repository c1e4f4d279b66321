package server

import (
	"context"
	"fmt"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// How the gateway sets Go's garbage collector (docs/operations.md, Memory and bounds).
//
// The live heap is usually a few MiB, so Go's default (GOGC=100, a
// collection at least every 4 MiB) collects nonstop under load: GOGC=400
// costs about 10% less CPU per request. But a live heap of tens of MiB (a
// client holding many locks, Redlock's warm connection pools) would then
// grow to five times that between collections. So GOGC follows the live
// heap (tuneGC): the heap may grow by about gcHeadroom, or by as much as is
// live when that is more, between collections — GOGC 400 for a live heap of
// up to 16 MiB, down to 100 from 64 MiB. What bounds the live heap is what
// the gateway lets clients make it hold (connections, waiting acquires,
// locks).
//
// The soft memory limit is where the collector starts working harder to
// stay below: it must follow the machine, not be a constant. A 48 MiB
// limit put a gateway holding 150 k locks, or 3 000 waiting acquires, on a
// collector that ran almost nonstop, and made every other client's requests
// five to nine times dearer (issue 13). So the limit is 90% of what the
// process may use: its cgroup's memory limit (a container's), else the
// machine's memory.
const (
	defaultGCPercent = 400
	minGCPercent     = 100
	gcHeadroom       = 64 << 20
	memoryFraction   = 0.9 // of the cgroup's or the machine's memory
)

// memoryPolicy is what the gateway sets: a soft memory limit (bytes;
// math.MaxInt64 is none) and where it came from, and GOGC.
type memoryPolicy struct {
	limit  int64
	source string // for the start-up log line and docs/operations.md
	// setLimit and gcPercent are what Run sets; false and 0 leave the
	// runtime's own value (GOMEMLIMIT or GOGC from the environment).
	setLimit  bool
	gcPercent int
}

// memorySources are where an automatic limit is read from; tests fake them.
type memorySources struct {
	cgroup func() (uint64, error) // memlimit.ErrNoLimit when there is none
	system func() (uint64, error)
}

var hostMemory = memorySources{cgroup: memlimit.FromCgroup, system: memlimit.FromSystem}

// choose decides the policy from the --memory-limit setting ("auto" or a
// size), the environment (GOMEMLIMIT and GOGC are Go's own and win, as they
// do for any Go program; with one of them, a --memory-limit of its own is
// a contradiction, refused) and the sources.
func (s memorySources) choose(setting string, getenv func(string) string) (memoryPolicy, error) {
	p := memoryPolicy{gcPercent: defaultGCPercent}
	if getenv("GOGC") != "" {
		p.gcPercent = 0 // the runtime read it
	}
	if v := getenv("GOMEMLIMIT"); v != "" {
		if setting != "auto" {
			return p, fmt.Errorf("GOMEMLIMIT=%s and a memory limit of %s: set one", v, setting)
		}
		n, err := parseByteSize(v)
		if err != nil {
			return p, fmt.Errorf("GOMEMLIMIT: %w", err)
		}
		p.limit, p.source = n, "GOMEMLIMIT"
		return p, nil
	}
	p.setLimit = true
	if setting != "auto" {
		n, err := parseByteSize(setting)
		if err != nil {
			return p, err
		}
		p.limit, p.source = n, "setting"
		return p, nil
	}
	if n, err := s.cgroup(); err == nil && n > 0 && n < math.MaxInt64 {
		p.limit, p.source = fraction(n), fmt.Sprintf("90%% of the cgroup's %s", formatBytes(int64(n)))
		return p, nil
	}
	// No cgroup limit (or none readable: not Linux, no permission).
	if n, err := s.system(); err == nil && n > 0 && n < math.MaxInt64 {
		p.limit, p.source = fraction(n), fmt.Sprintf("90%% of the machine's %s; no cgroup limit", formatBytes(int64(n)))
		return p, nil
	}
	p.limit, p.source = math.MaxInt64, "none: no cgroup limit, machine memory unknown"
	return p, nil
}

func fraction(n uint64) int64 {
	return int64(min(float64(n)*memoryFraction, math.MaxInt64/2))
}

// gcPercent is GOGC for a live heap of live bytes: a headroom of
// gcHeadroom, within GOGC 100 to 400.
func gcPercent(live uint64) int {
	if live == 0 {
		return defaultGCPercent
	}
	return int(min(max(gcHeadroom*100/live, minGCPercent), defaultGCPercent))
}

// tuneGC sets GOGC from the live heap, as the last collection measured it,
// every interval until ctx ends; a collection's own pacing does the rest.
func tuneGC(ctx context.Context, interval time.Duration) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	last := defaultGCPercent
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return
		}
		if p := gcPercent(sample[0].Value.Uint64()); p != last {
			debug.SetGCPercent(p)
			last = p
		}
	}
}

// apply sets the policy for the whole process.
func (p memoryPolicy) apply() {
	if p.gcPercent > 0 {
		debug.SetGCPercent(p.gcPercent)
	}
	if p.setLimit {
		debug.SetMemoryLimit(p.limit)
	}
}

// parseByteSize reads a size as GOMEMLIMIT does: a whole number of bytes
// with an optional unit, B, KiB, MiB, GiB or TiB; "off" is no limit.
func parseByteSize(s string) (int64, error) {
	if s == "off" {
		return math.MaxInt64, nil
	}
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	num, shift := s, uint(0)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, shift = n, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("%q is not a memory size (examples: 512MiB, 2GiB, 1073741824, off)", s)
	}
	return n << shift, nil
}

// formatBytes prints n in the largest binary unit that keeps one decimal.
func formatBytes(n int64) string {
	if n == math.MaxInt64 {
		return "none"
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return strconv.FormatInt(n, 10) + " B"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + units[i]
}
