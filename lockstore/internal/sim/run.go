package sim

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

// MustReplace is src with its one occurrence of old replaced by new: how a
// control undoes a rule in a script. It panics when src does not hold old
// exactly once, so a control cannot silently stop undoing anything once the
// script changes.
func MustReplace(src, old, new string) string {
	if strings.Count(src, old) != 1 {
		panic("sim control: the script no longer contains " + old)
	}
	return strings.Replace(src, old, new, 1)
}

// NoLinger is release.lua as the gateway sends it with rule L undone, the
// control of the at-least check on both backends: it never lingers, so a
// release before the hold-at-least end frees the key at once.
func NoLinger() string {
	return script.DeadlineLua + MustReplace(script.ReleaseLua,
		"if until_ms > now_ms then\n  redis.call('SET', KEYS[1], 'L'", "if false then\n  redis.call('SET', KEYS[1], 'L'")
}

// LingerCapped is release.lua whose lingering value ends with the lease
// it replaces, not at its hold-at-least end T: the same as rule L while
// the lease outlives T, and a key freed early when the hold-at-least is
// longer than the lease (a control of the at-least check's second half).
func LingerCapped() string {
	return script.DeadlineLua + MustReplace(script.ReleaseLua,
		"if until_ms > now_ms then\n  redis.call('SET', KEYS[1], 'L'",
		"until_ms = math.min(until_ms, redis.call('PEXPIRETIME', KEYS[1]))\nif until_ms > now_ms then\n  redis.call('SET', KEYS[1], 'L'")
}

// Seed, First, Ops, Duration and Control are the flags -sim.seed,
// -sim.first, -sim.ops, -sim.duration and -sim.control of both models'
// tests (the package doc shows them in use).
var (
	Seed     = flag.Uint64("sim.seed", 0, "simulator: run only this seed")
	First    = flag.Uint64("sim.first", 1, "simulator: the first seed of a run")
	Ops      = flag.Int("sim.ops", 0, "simulator: requests to run in all (default 100 000; make sim runs for a duration)")
	Duration = flag.Duration("sim.duration", 0, "simulator: run seeds until this much wall time has passed")
	Control  = flag.String("sim.control", "", "simulator: undo this rule (a control; the redis model's simControls, the Redlock model's rlControls)")
)

// SeedOps is how many requests one seed of the `redis` model runs: short
// runs keep traces short and seeds many.
const SeedOps = 2_000

// Run is one seed's outcome.
type Run struct {
	Seed      uint64
	Ops       int
	Calls     int
	Late      int
	Virtual   int64 // µs of virtual time
	Violation *Violation
	Trace     string
	Answers   map[string]int // "acquire 201", … : what the workload reached
}

// Report tells r's violation and its trace, in ms since the start of a
// World's run (Base).
func (r Run) Report() string { return r.report(r.Base()) }

// RedlockReport is Report for a run of the Redlock model, whose clock
// starts at 0.
func (r Run) RedlockReport() string { return r.report(0) }

func (r Run) report(base int64) string {
	v := r.Violation
	return fmt.Sprintf("seed %d: %s at %.3f ms on %s: %s\n%s", r.Seed, v.Check, float64(v.at-base)/1000, v.key, v.msg, r.Trace)
}

// Base is the virtual time, in µs, at which the World of r's seed starts.
func (r Run) Base() int64 { return startOf(r.Seed) }

// startOf is the virtual time at which a seed's World starts, in µs since
// the Unix epoch: early 2027, 1000 s apart by seed.
func startOf(seed uint64) int64 { return 1_800_000_000_000_000 + int64(seed%1000)*1_000_000_000 }

// CallFor is the store call a request makes: the real code.
func CallFor(s Store, r *Request, limit int) func(context.Context) (Result, error) {
	owner := fmt.Sprintf("c%d", r.Client)
	switch {
	case !r.Sem && r.Kind == "acquire":
		return func(ctx context.Context) (Result, error) {
			l, err := s.Acquire(ctx, r.Key, lockstore.AcquireRequest{Token: r.Token, TTL: r.TTL, Owner: owner, HoldAtLeast: r.AtLeast})
			return Result{Fence: l.Fence, Granted: l.Granted, ExpiresAt: l.ExpiresAt, renewed: l.Renewed}, err
		}
	case !r.Sem && r.Kind == "extend":
		return func(ctx context.Context) (Result, error) {
			if b, ok := s.(lockstore.BatchExtender); ok && r.Batch {
				e := b.ExtendBatch(ctx, []lockstore.Extension{{Key: r.Key, Token: r.Token, TTL: r.TTL}})[0]
				return Result{Fence: e.Lease.Fence, Granted: e.Lease.Granted, ExpiresAt: e.Lease.ExpiresAt}, e.Err
			}
			l, err := s.Extend(ctx, r.Key, r.Token, r.TTL)
			return Result{Fence: l.Fence, Granted: l.Granted, ExpiresAt: l.ExpiresAt}, err
		}
	case !r.Sem:
		return func(ctx context.Context) (Result, error) { return Result{}, s.Release(ctx, r.Key, r.Token) }
	case r.Kind == "acquire":
		return func(ctx context.Context) (Result, error) {
			p, err := s.SemAcquire(ctx, r.Key, lockstore.PermitRequest{Token: r.Token, TTL: r.TTL, Owner: owner, Limit: limit})
			return Result{Fence: p.Fence, Granted: p.Granted, ExpiresAt: p.ExpiresAt, renewed: p.Renewed}, err
		}
	case r.Kind == "extend":
		return func(ctx context.Context) (Result, error) {
			if b, ok := s.(lockstore.BatchSemExtender); ok && r.Batch {
				e := b.SemExtendBatch(ctx, []lockstore.Extension{{Key: r.Key, Token: r.Token, TTL: r.TTL}})[0]
				return Result{Fence: e.Permit.Fence, Granted: e.Permit.Granted, ExpiresAt: e.Permit.ExpiresAt}, e.Err
			}
			p, err := s.SemExtend(ctx, r.Key, r.Token, r.TTL)
			return Result{Fence: p.Fence, Granted: p.Granted, ExpiresAt: p.ExpiresAt}, err
		}
	}
	return func(ctx context.Context) (Result, error) { return Result{}, s.SemRelease(ctx, r.Key, r.Token) }
}

// AnswerOf is the HTTP status the gateway would answer (handlers'
// table), in short.
func AnswerOf(kind string, a Result, err error) string {
	var held *lockstore.HeldError
	var full *lockstore.FullError
	var mismatch *lockstore.LimitMismatchError
	switch {
	case err == nil && kind == "release":
		return "204"
	case err == nil && kind == "acquire" && !a.renewed:
		return "201"
	case err == nil:
		return "200"
	case errors.Is(err, lockstore.ErrUnavailable):
		return "503"
	case errors.As(err, &held):
		return "409 held"
	case errors.As(err, &full):
		return "409 full"
	case errors.As(err, &mismatch):
		return "409 limit"
	case errors.Is(err, lockstore.ErrNotHeld):
		return "404"
	case errors.Is(err, lockstore.ErrTokenMismatch):
		return "409 token"
	}
	return "500 " + err.Error()
}

// CPU is the CPU time the process used so far: what the simulator's
// speed is measured in, since a loaded machine stretches wall time.
func CPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Budget is how many requests the `redis` model's sweep runs in all.
func Budget() int {
	if *Ops > 0 {
		return *Ops
	}
	// The short budget of 100 000 simulated requests is shared: the
	// `redis` model runs 80 000, the Redlock model RedlockBudget (20 000),
	// about 7 s and 12 s of CPU. make test runs the same as -short: -race
	// makes it slower, not surer.
	return 100_000 - RedlockBudget
}

// RedlockBudget is the Redlock model's share of the short budget of
// simulated requests (Budget): the `redis` model runs the rest.
const RedlockBudget = 20_000

// LogSweep reports a sweep's totals and speed (CPU time: a loaded machine
// stretches wall time), and with -v the answers by kind.
func LogSweep(t *testing.T, runs []Run, began time.Time, cpu time.Duration) {
	t.Helper()
	elapsed, used := time.Since(began), CPU()-cpu
	ops, calls, late, virtual := Totals(runs)
	t.Logf("%d seeds (%d … %d), %d requests, %d script calls (%d landed after their gateway gave up), %s virtual; %s wall, %s CPU: %.0f requests per CPU second",
		len(runs), runs[0].Seed, runs[len(runs)-1].Seed, ops, calls, late, Dur(virtual), elapsed.Round(time.Millisecond),
		used.Round(time.Millisecond), float64(ops)/used.Seconds())
	if testing.Verbose() {
		all := map[string]int{}
		for _, r := range runs {
			for k, n := range r.Answers {
				all[k] += n
			}
		}
		var parts []string
		for k, n := range all {
			parts = append(parts, fmt.Sprintf("%s ×%d", k, n))
		}
		sort.Strings(parts)
		t.Logf("answers: %s", strings.Join(parts, ", "))
	}
}

// Totals sums runs' requests, script calls, late calls and virtual time.
func Totals(runs []Run) (ops, calls, late int, virtual int64) {
	for _, r := range runs {
		ops += r.Ops
		calls += r.Calls
		late += r.Late
		virtual += r.Virtual
	}
	return
}

// TraceLen is how many events of the failing key a report shows.
var TraceLen = 60

// Store is what CallFor calls: a Redis or a Redlock.
type Store interface {
	lockstore.Store
	lockstore.Semaphores
}

// Batched picks whether an extend goes as a hold renewer's batch (of one:
// ExtendBatch, SemExtendBatch), where the store has one: half of them, so
// both paths meet every fault.
func Batched(r *rand.Rand, kind string) bool {
	return kind == "extend" && r.Float64() < 0.5
}

// HoldAtLeast is a lock acquire's HoldAtLeast: one in ten asks the key to
// stay held at least the lease's length after the grant, so that its
// releases leave lingering values (docs/safety.md, rule L); those with an
// odd number of milliseconds (about half) twice the lease's length, so
// that a copy neither released nor lingering can run out before the end.
// (By the TTL, not another draw: the rest of a seed's run stays as it
// was, and with it where the controls are found.)
func HoldAtLeast(r *rand.Rand, kind string, sem bool, ttl time.Duration) time.Duration {
	if kind != "acquire" || sem || r.Float64() >= 0.1 {
		return 0
	}
	if ttl/time.Millisecond%2 == 1 {
		return 2 * ttl
	}
	return ttl
}
