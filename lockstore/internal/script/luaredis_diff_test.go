//go:build !race

// The simulator runs one goroutine at a time, so the race detector finds
// nothing in it, and slows its Lua interpreter several times over: make
// test runs it without -race (Makefile, test).

package script

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/luaredis"
	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The differential test: what proves internal/luaredis, the node the
// protocol simulator runs, equal to Redis for everything lockstore's
// scripts do. It runs the same random sequences against luaredis and a
// real redis-server whose wall clock is frozen (redistest's frozen clock)
// at luaredis's time, step by step: every script of lockstore/internal/script/lua with
// random but well-formed arguments made by the package's own builders
// (acquireArgs.call, releaseCall, …: tokens, TTLs, seeds, attempt ids,
// waiters, quotas, limits, slots, values read before or stale), raw
// commands on the same keys (every command the scripts use, with their
// options, wrong types and bad arguments), and probe scripts for the
// Lua ↔ reply conversions. After every step it compares the replies, and
// every few steps (and at the end) the whole key space: each key's type,
// value (string, hash fields, sorted set members and scores) and expiry to
// the millisecond. The clocks move by random steps, to exact expiry
// instants, past TTLs, and now and then a little back.

var (
	diffOps   = flag.Int("diff.ops", 4000, "steps per seed of the luaredis differential test")
	diffSeeds = flag.Int("diff.seeds", 3, "seeds the luaredis differential test runs")
	diffSeed  = flag.Uint64("diff.seed", 0, "run only this seed of the luaredis differential test")
)

func TestLuaredisMatchesRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; go test -short runs the simulator on internal/luaredis, which this test proves equal to Redis")
	}
	lib, err := redistest.BuildFrozenClockShim(t.TempDir())
	require.NoError(t, err)
	// Without active expiry, Redis deletes an expired key only when a
	// command reads it, as luaredis does; with it, a key Redis deleted in
	// the background would come back on luaredis only when the clock steps
	// back past its expiry.
	srv := redistest.StartOptions(t, redistest.Options{ClockShim: lib, Args: []string{"--enable-debug-command", "yes"}})
	// Raw commands on RESP2, whose replies luaredis shapes; scripts on
	// either, RESP3 being what the gateway speaks (go-redis's default).
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, Protocol: 2})
	c3 := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, Protocol: 3})
	t.Cleanup(func() { _ = c.Close(); _ = c3.Close() })
	require.NoError(t, c.Do(context.Background(), "DEBUG", "SET-ACTIVE-EXPIRE", "0").Err())
	seeds := []uint64{}
	if *diffSeed != 0 {
		seeds = append(seeds, *diffSeed)
	} else {
		for i := range *diffSeeds {
			seeds = append(seeds, uint64(i+1))
		}
	}
	reached := map[string]int{}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			d := newDiff(t, srv, c, c3, seed)
			defer func() {
				for k, n := range d.outcomes {
					reached[k] += n
				}
			}()
			for i := range *diffOps {
				d.step(i)
				if t.Failed() {
					t.Logf("replay: go test ./lockstore/internal/script -run TestLuaredisMatchesRedis -diff.seed %d -diff.ops %d", seed, i+1)
					return
				}
			}
			d.compareState(*diffOps)
			var seen []string
			for k, n := range d.outcomes {
				seen = append(seen, fmt.Sprintf("%s ×%d", k, n))
			}
			sort.Strings(seen)
			t.Logf("script outcomes: %s", strings.Join(seen, ", "))
			t.Logf("%d steps, %d script calls, %d raw commands, %d probes, %d error replies, %d state comparisons (%d keys)",
				*diffOps, d.scripts, d.raws, d.probes, d.errs, d.states, d.keysSeen)
		})
	}
	if t.Failed() || *diffSeed != 0 {
		return
	}
	// The run must reach each script's paths that matter to the protocol,
	// or a change to the generators could leave them untested unnoticed.
	for _, want := range []string{"acquire.lua 0", "acquire.lua 1", "acquire.lua 2", "acquire.lua 3", "acquire.lua 4",
		"extend.lua 1", "extend.lua 0", "extend.lua -1", "extend.lua -4", "release.lua 1", "release.lua 0", "release.lua -1", "release.lua -2",
		"discard.lua 1", "discard.lua 0", "confirm.lua 1", "confirm.lua 0", "confirm.lua 2", "confirm.lua 3", "unwait.lua 1", "sem_acquire.lua 0", "sem_acquire.lua 1",
		"sem_acquire.lua 2", "sem_acquire.lua 5", "sem_extend.lua 1", "sem_extend.lua -4", "sem_read.lua value", "sem_release.lua 1",
		"sem_release.lua -2", "sem_unwait.lua 1", "sem_confirm.lua 1", "sem_confirm.lua 2", "sem_confirm.lua 3", "sem_discard.lua 1", "quota.lua 1", "quota.lua 4"} {
		if reached[want] == 0 {
			t.Errorf("no call reached %q", want)
		}
	}
}

type diff struct {
	t       *testing.T
	srv     *redistest.Server
	c, c3   *redis.Client
	m       *luaredis.Server
	r       *rand.Rand
	now     int64 // µs
	ctx     context.Context
	tokens  []string
	owners  []string
	values  []string // lock and permit values seen in replies
	expires []int64  // expiries seen (ms)
	fences  []int64
	attempt []string

	scripts, raws, probes, errs, states, keysSeen int
	// outcomes counts each script's replies by their first element (a
	// code), to show which paths the run took.
	outcomes map[string]int
	// f draws what forced releases add (their flag, the holder's renewal
	// that follows one, the tombstone keys among the raw keys), apart
	// from r, so that the rest of a seed's run stays as it was.
	f *rand.Rand
}

func newDiff(t *testing.T, srv *redistest.Server, c, c3 *redis.Client, seed uint64) *diff {
	d := &diff{t: t, srv: srv, c: c, c3: c3, m: luaredis.New(), r: rand.New(rand.NewPCG(seed, 26)), f: rand.New(rand.NewPCG(seed, 28)), ctx: context.Background(),
		tokens: []string{"tok-a", "tok-b", "tok-c"}, owners: []string{"", "o1", "a:b"},
		outcomes: map[string]int{},
		attempt:  []string{"AAAAAAAAAAAAAAAAAAAAAA", "bbbbbbbbbbbbbbbbbbbbbb", "c-c_c-c_c-c_c-c_c-c_cc"}}
	d.now = 1_750_000_000_000_000 + int64(seed)*1_000_000_000 + d.r.Int64N(1_000_000)
	d.setTime()
	require.NoError(t, c.FlushAll(d.ctx).Err())
	// One run id on both sides, so that rule D's deadline (deadline.lua,
	// clock.lua) names the same server on each.
	info, err := c.Info(d.ctx, "server").Result()
	require.NoError(t, err)
	_, id, _ := strings.Cut(info, "run_id:")
	d.m.RunID = strings.TrimSpace(id[:40])
	return d
}

func (d *diff) setTime() {
	d.srv.FreezeClock(d.now)
	d.m.SetTime(d.now)
}

// aside runs fn with its draws from f: a step that only reads (a renewal
// that finds a tombstone writes nothing) leaves the rest of the run as it
// was.
func (d *diff) aside(fn func()) {
	r := d.r
	d.r = d.f
	defer func() { d.r = r }()
	fn()
}

func (d *diff) pick(n int) int { return d.r.IntN(n) }

func (d *diff) chance(p float64) bool { return d.r.Float64() < p }

// advance moves both clocks: not at all, by µs, by ms, past TTLs, to the
// edge of an expiry seen, and now and then back a little.
func (d *diff) advance() {
	switch x := d.r.Float64(); {
	case x < 0.3:
	case x < 0.5:
		d.now += d.r.Int64N(1000)
	case x < 0.8:
		d.now += d.r.Int64N(50_000)
	case x < 0.92:
		d.now += 100_000 + d.r.Int64N(3_000_000)
	case x < 0.98 && len(d.expires) > 0:
		e := d.expires[d.pick(len(d.expires))]
		d.now = max(d.now, (e+int64(d.pick(3))-1)*1000+d.r.Int64N(1000))
	default:
		d.now -= d.r.Int64N(5_000)
	}
	d.setTime()
}

func (d *diff) step(i int) {
	d.advance()
	switch x := d.r.Float64(); {
	case x < 0.72:
		d.script()
	case x < 0.95:
		d.raw()
	default:
		d.probe()
	}
	if i%7 == 0 {
		d.compareState(i)
	}
}

// call sends argv to both on RESP2 and compares the replies.
func (d *diff) call(what string, argv ...any) any {
	return d.callProto(what, false, argv...)
}

// callProto is call, on RESP3 when resp3.
func (d *diff) callProto(what string, resp3 bool, argv ...any) any {
	d.t.Helper()
	got, gerr := d.m.Do(argv...)
	c := d.c
	if resp3 { // luaredis's script replies are RESP2's and RESP3's alike
		what += " (RESP3)"
		c = d.c3
	}
	want, werr := c.Do(d.ctx, argv...).Result()
	if errors.Is(werr, redis.Nil) {
		want, werr = nil, nil
	}
	g, w := normReply(got, gerr), normReply(want, werr)
	if g != w {
		d.t.Errorf("%s at %d µs: %s\nluaredis: %s\nredis:    %s", what, d.now, argSummary(argv), g, w)
	}
	if werr != nil {
		d.errs++
	}
	d.harvest(want)
	return want
}

func argSummary(argv []any) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		s := luaredis.Arg(a)
		if len(s) > 60 {
			s = fmt.Sprintf("<%d bytes: %q…>", len(s), s[:30])
		}
		parts[i] = s
	}
	return strings.Join(parts, " ")
}

var scriptWhere = regexp.MustCompile(` script: [0-9a-f]+, on @user_script:\d+\.$`)

// normReply prints a reply so that the two servers' can be compared: an
// error by its message without where the script failed, a Lua runtime
// error (gopher-lua words them its own way) by its code alone.
func normReply(v any, err error) string {
	if err != nil {
		return "error(" + normErr(err.Error()) + ")"
	}
	return normValue(v)
}

func normErr(msg string) string {
	msg = scriptWhere.ReplaceAllString(msg, "")
	if strings.HasPrefix(msg, "ERR user_script:") || strings.HasPrefix(msg, "ERR Error compiling") {
		return "ERR <lua runtime error>"
	}
	return msg
}

func normValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "nil"
	case int64:
		return "int(" + strconv.FormatInt(x, 10) + ")"
	case string:
		return strconv.Quote(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = normValue(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	case error:
		return "error(" + normErr(x.Error()) + ")"
	case bool:
		return fmt.Sprintf("bool(%v)", x)
	}
	return fmt.Sprintf("%T(%v)", v, v)
}

var (
	lockValueRE = regexp.MustCompile(`^[0-9a-f]{64}:`)
	semValueRE  = regexp.MustCompile(`^\d+:[0-9a-f]{64}:`)
)

// harvest keeps values, expiries and fences from replies, so later calls
// can name them (a release of the value read, a raise to a fence seen).
func (d *diff) harvest(v any) {
	switch x := v.(type) {
	case string:
		if lockValueRE.MatchString(x) || semValueRE.MatchString(x) {
			d.values = append(d.values, x)
			if lv, err := ParseLockValue(x); err == nil {
				d.fences = append(d.fences, lv.Fence)
			}
			if sv, err := ParseSemValue(1, x); err == nil {
				d.fences = append(d.fences, sv.Fence)
				d.expires = append(d.expires, sv.exp)
			}
		}
	case int64:
		if x > 1_000_000_000_000 && x < 10_000_000_000_000 { // an expiry, Unix ms
			d.expires = append(d.expires, x)
		}
	case []any:
		for _, e := range x {
			d.harvest(e)
		}
	}
	if len(d.values) > 64 {
		d.values = d.values[len(d.values)-64:]
	}
	if len(d.expires) > 64 {
		d.expires = d.expires[len(d.expires)-64:]
	}
	if len(d.fences) > 64 {
		d.fences = d.fences[len(d.fences)-64:]
	}
}

func (d *diff) eval(name, src string, keys []string, args ...any) any {
	d.scripts++
	argv := append([]any{"EVAL", src, len(keys)}, toAnys(keys)...)
	r := d.callProto(name, d.chance(0.7), append(argv, args...)...)
	d.outcomes[name+" "+outcome(r)]++
	return r
}

// outcome names a script's reply by its code: the first element of an
// array, an integer, or its type.
func outcome(r any) string {
	if l, ok := r.([]any); ok {
		if len(l) == 0 {
			return "{}"
		}
		r = l[0]
	}
	switch x := r.(type) {
	case int64:
		return strconv.FormatInt(x, 10)
	case nil:
		return "nil"
	case string:
		if len(x) > 8 {
			return "value"
		}
		return strconv.Quote(x)
	}
	return fmt.Sprintf("%T", r)
}

func toAnys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func (d *diff) key() string { return []string{"a", "b"}[d.pick(2)] }

func (d *diff) token() string { return d.tokens[d.pick(len(d.tokens))] }

func (d *diff) digest() string { return DigestHex(d.token()) }

func (d *diff) owner() string { return d.owners[d.pick(len(d.owners))] }

func (d *diff) attemptID() string {
	return d.attempt[d.pick(len(d.attempt))]
}

func (d *diff) ttl() time.Duration {
	switch d.pick(4) {
	case 0:
		return time.Duration(10+d.pick(40)) * time.Millisecond
	case 1:
		return time.Duration(50+d.pick(500)) * time.Millisecond
	case 2:
		return time.Duration(500+d.pick(5000)) * time.Millisecond
	}
	return time.Duration(1+d.pick(60)) * time.Second
}

func (d *diff) seed() int64 {
	if d.chance(0.4) {
		return 0
	}
	return d.now + d.r.Int64N(10_000_000) - 5_000_000
}

func (d *diff) ticket() WaitTicket {
	if d.chance(0.6) {
		return WaitTicket{}
	}
	ids := []string{"gw1.1", "gw1.2", "gw2.1", "old7"}
	return WaitTicket{Id: ids[d.pick(len(ids))], Heartbeat: time.Duration(200+d.pick(3000)) * time.Millisecond}
}

func (d *diff) user() string { return []string{"u1", "u2"}[d.pick(2)] }

func (d *diff) publish() string {
	if d.chance(0.15) {
		return PublishShard
	}
	return PublishAll
}

// value is a lock or permit value to name: one seen (usually the latest),
// or a made-up one.
func (d *diff) value() string {
	if len(d.values) > 0 && d.chance(0.9) {
		if d.chance(0.6) {
			return d.values[len(d.values)-1]
		}
		return d.values[d.pick(len(d.values))]
	}
	return d.digest() + ":123+100:"
}

func (d *diff) expiry() int64 {
	if len(d.expires) > 0 && d.chance(0.85) {
		if d.chance(0.6) {
			return d.expires[len(d.expires)-1]
		}
		return d.expires[d.pick(len(d.expires))]
	}
	return d.now/1000 + d.r.Int64N(10_000)
}

func (d *diff) fence() int64 {
	if len(d.fences) > 0 && d.chance(0.8) {
		return d.fences[d.pick(len(d.fences))] + d.r.Int64N(3) - 1
	}
	return d.now + d.r.Int64N(10_000_000) - 5_000_000
}

// script calls one of lockstore's scripts with arguments the Go code
// would pass, made by its own builders where it has them.
func (d *diff) script() {
	key := d.key()
	switch d.pick(24) {
	case 0, 1, 2, 3, 4:
		a := AcquireArgs{Digest: d.digest(), Ttl: d.ttl(), Owner: d.owner(), Ticket: d.ticket(), Publish: PublishAll}
		if d.chance(0.3) {
			a.HoldAtLeast = d.ttl() // rule L: release.lua may leave a lingering value
		}
		switch x := d.r.Float64(); {
		case x < 0.25:
			a.Attempt, a.Seed, a.Provisional = d.attemptID(), d.seed(), d.ttl()
		case x < 0.4:
			a.Quota = counting{Max: d.pick(3), User: d.user(), Holder: d.user()}
		case x < 0.5:
			a.Publish = PublishShard
			a.Quota = counting{Max: d.pick(4) - 1, User: d.user()}
		case x < 0.6:
			a.Quota = counting{Holder: d.user()}
		}
		keys, args := a.Call(key)
		d.eval("acquire.lua", AcquireLua, keys, args...)
	case 5, 6:
		keys, args := []string{LockKey(key), ForcedKey(key)}, []any{d.digest(), d.ttlOrZero()}
		switch d.pick(4) {
		case 0:
			args = append(args, "1")
		case 1:
			keys = QuotaKeys(keys, d.user())
		case 2:
			args = append(args, "", "1")
		}
		d.eval("extend.lua", ExtendLua, keys, args...)
	case 7:
		d.eval("inspect.lua", InspectLua, []string{LockKey(key)})
	case 8, 9:
		v, err := ParseLockValue(d.value())
		if err != nil {
			v = LockValue{Raw: d.value()}
		}
		v.Expiry = d.expiry()
		if cur, ok := d.m.Peek(LockKey(key)); ok && cur.Kind == "string" && d.chance(0.5) {
			// The lease as it is: what a release that read it a moment
			// ago passes (and, 1 in 5, its expiry a millisecond off).
			if lv, err := ParseLockValue(cur.Str); err == nil {
				v = lv
			}
			v.Raw, v.Expiry = cur.Str, cur.Expiry
			if d.chance(0.2) {
				v.Expiry += int64(d.pick(3)) - 1
			}
		}
		digest := d.digest()
		if d.chance(0.6) {
			digest = v.Digest
		}
		v.Forced = d.f.Float64() < 0.3 // leaves the digest for extend.lua's -4
		keys, args := ReleaseCall(key, digest, d.publish(), v, d.chance(0.5))
		if d.chance(0.2) {
			keys = QuotaKeys(keys, d.user())
		}
		if outcome(d.eval("release.lua", ReleaseLua, keys, args...)) == "1" && v.Forced && d.f.IntN(2) == 0 {
			// The holder's next renewal, which finds the tombstone.
			d.aside(func() {
				d.eval("extend.lua", ExtendLua, []string{LockKey(key), ForcedKey(key)}, digest, 1+d.f.IntN(3000))
			})
		}
	case 10:
		digest, attempt := d.current(key)
		d.eval("discard.lua", DiscardLua, []string{LockKey(key), QueueKey(key)}, digest, attempt, Channel(key))
	case 11:
		digest, attempt := d.current(key)
		fence := d.fence()
		confirm := func() any {
			return d.eval("confirm.lua", ConfirmLua, []string{LockKey(key), FenceKey(key)},
				digest, attempt, fence, FenceMargin.Milliseconds(), d.ttl().Milliseconds())
		}
		if outcome(confirm()) == "1" && d.chance(0.5) {
			confirm() // a twin's confirmation of the same fence: joined
		}
	case 12:
		keys := []string{LockKey(key), QueueKey(key), FenceKey(key)}
		if d.chance(0.2) {
			keys = QuotaKeys(keys, d.user())
		}
		v, e := d.value(), d.expiry()
		if cur, ok := d.m.Peek(LockKey(key)); ok && cur.Kind == "string" && d.chance(0.5) {
			v, e = cur.Str, cur.Expiry
		}
		d.eval("unwait.lua", unwaitLua, keys, v, e, Channel(key), FenceMargin.Milliseconds())
	case 13:
		tk := d.ticket()
		d.eval("leave.lua", leaveLua, []string{LockKey(key), QueueKey(key), AliveKey(key)}, tk.Id, Channel(key), d.publish())
	case 14:
		d.eval("heartbeat.lua", heartbeatLua, []string{LockKey(key), QueueKey(key), AliveKey(key)},
			[]string{"gw1", "gw2", "old7"}[d.pick(3)], 200+d.pick(3000), []string{"gw1.1", "gw2.1", "old7", ""}[d.pick(4)])
	case 15:
		if d.chance(0.5) {
			d.eval("list.lua", listLua, []string{LockKey(key), QueueKey(key)})
		} else {
			d.eval("window.lua", windowLua, []string{"lockgw:{ratelimit:" + key + "}:window"}, d.attemptID(), 10+d.pick(2000))
		}
	case 17:
		// Rule D: a deadline around now, on this server or another.
		run := d.m.RunID
		if d.chance(0.2) {
			run = strings.Repeat("f", 40)
		}
		deadline := run + ":" + strconv.FormatInt(d.now-2+d.r.Int64N(5), 10)
		if d.chance(0.5) {
			d.eval("deadline.lua", DeadlineLua+"return {'ran', #ARGV, ARGV[1]}", []string{LockKey(key)}, d.digest(), deadline)
		} else {
			d.eval("clock.lua", ClockLua, []string{LockKey(key)})
		}
	case 16:
		if d.chance(0.3) {
			d.nodesetScript()
			return
		}
		args := []any{"reserve", LockKey(key) + "#" + d.digest(), d.ttl().Milliseconds(), 1 + d.pick(2)}
		if d.chance(0.4) {
			args = args[:3]
			args[0] = "move"
		}
		d.eval("quota.lua", quotaLua, []string{QuotaKey(d.user())}, args...)
	default:
		d.semScript()
	}
}

// nodesetScript runs a node list script (rules C, W, Q, T): a marking
// op, or a guarded script's check, over two lists and their transition.
func (d *diff) nodesetScript() {
	lists := []string{"a/0,b/0,c/0", "a/0,b/0,d/0"}
	list, prev := lists[d.pick(2)], lists[d.pick(2)]
	if d.chance(0.7) {
		op := []string{"read", "try", "commit", "join", "unmark", "begin", "finish"}[d.pick(7)]
		inPrev := []string{"0", "1"}[d.pick(2)]
		d.eval("nodeset_mark.lua", NodesetMarkLua, []string{SetKey, QuarantineKey, SettleKey, MaxTTLKey},
			list, op, 1+d.pick(50), d.pick(3)*int(d.ttl().Milliseconds()), prev, inPrev, d.ttl().Milliseconds(), d.ttl().Milliseconds())
		return
	}
	marker, also := list, ""
	if d.chance(0.5) {
		marker, also = prev+">"+list, list
	}
	d.eval("nodeset.lua", NodesetLua+"return {'ran', #KEYS, #ARGV}", []string{LockKey(key0), SetKey, QuarantineKey, MaxTTLKey}, d.digest(), marker, also, d.ttl().Milliseconds())
}

// key0 is a lock key for scripts that need one, not what they test.
const key0 = "a"

// current is a token digest and attempt id to name in a Redlock round's
// script: half the time one of the rounds that hold the key's lease.
func (d *diff) current(key string) (string, string) {
	if cur, ok := d.m.Peek(LockKey(key)); ok && d.chance(0.5) {
		if lv, err := ParseLockValue(cur.Str); err == nil && strings.HasPrefix(lv.Attempt, "~") {
			ids := strings.Split(strings.TrimPrefix(lv.Attempt[1:], "!"), ".")
			return lv.Digest, ids[d.pick(len(ids))]
		}
	}
	return d.digest(), d.attemptID()
}

func (d *diff) ttlOrZero() int64 {
	if d.chance(0.15) {
		return 0
	}
	return d.ttl().Milliseconds()
}

// permit is a live permit of the semaphore as luaredis holds it (its
// slot, value and parsed value), for the scripts that name one.
func (d *diff) permit(key string) (int, string, SemValue, bool) {
	h, ok := d.m.Peek(SemPermitsKey(key))
	if !ok || h.Kind != "hash" {
		return 0, "", SemValue{}, false
	}
	var slots []string
	for f := range h.Hash {
		if _, err := strconv.Atoi(f); err == nil {
			slots = append(slots, f)
		}
	}
	if len(slots) == 0 {
		return 0, "", SemValue{}, false
	}
	sort.Strings(slots)
	f := slots[d.pick(len(slots))]
	slot, _ := strconv.Atoi(f)
	v, err := ParseSemValue(slot, h.Hash[f])
	return slot, h.Hash[f], v, err == nil
}

func (d *diff) semScript() {
	key := []string{"s", "t"}[d.pick(2)]
	if d.chance(0.1) {
		key = "u"
	}
	limit := 1 + d.pick(3)
	pk, ek := SemPermitsKey(key), SemExpiryKey(key)
	switch d.pick(10) {
	case 0, 1, 2:
		a := SemArgs{Digest: d.digest(), Ttl: d.ttl(), Owner: d.owner(), Limit: limit, Ticket: d.ticket(), Publish: d.publish()}
		if d.chance(0.5) {
			a.Attempt, a.Seed, a.Slot = d.attemptID(), d.seed(), 1+d.pick(limit+1)
			a.Provisional = d.ttl()
		}
		keys := []string{pk, ek, SemFenceKey(key), SemQueueKey(key), SemAliveKey(key)}
		d.eval("sem_acquire.lua", SemCommonLua+SemAcquireLua, keys, a.Digest, a.Ttl.Milliseconds(), a.Owner, a.Limit, a.Slot, a.Attempt, a.Seed,
			FenceMargin.Milliseconds(), a.Ticket.Id, a.Ticket.Heartbeat.Milliseconds(), SemChannel(key), a.Publish, a.Provisional.Milliseconds())
	case 3:
		keys, args := []string{pk, ek, SemForcedKey(key)}, []any{d.digest(), d.ttlOrZero(), ""}
		if d.chance(0.3) {
			args[2] = "1"
		}
		d.eval("sem_extend.lua", SemCommonLua+SemExtendLua, keys, append(args, d.publish())...)
	case 4:
		d.eval("sem_read.lua", SemCommonLua+SemReadLua, []string{pk, ek}, d.digest())
	case 5:
		digest := d.digest()
		v := d.value()
		if sv, err := ParseSemValue(1, v); err == nil && d.chance(0.6) {
			digest = sv.Digest
		}
		if _, raw, pv, ok := d.permit(key); ok && d.chance(0.5) {
			digest, v = pv.Digest, raw
		}
		forced := d.f.Float64() < 0.3
		keys, args := SemReleaseCall(key, digest, d.publish(), SemValue{Raw: v, Forced: forced})
		if outcome(d.eval("sem_release.lua", SemCommonLua+SemReleaseLua, keys, args...)) == "1" && forced {
			// The holder's next renewal, which finds the tombstone.
			d.aside(func() {
				d.eval("sem_extend.lua", SemCommonLua+SemExtendLua, []string{pk, ek, SemForcedKey(key)}, digest, 1+d.f.IntN(3000), "", PublishAll)
			})
		}
	case 6:
		d.eval("sem_inspect.lua", SemCommonLua+SemInspectLua, []string{pk, ek})
	case 7:
		if d.chance(0.3) {
			digest, maker := d.digest(), d.attemptID()
			// Mostly its own value, the one W withdraws unless confirmed:
			// a provisional permit left unconfirmed is rare in the run
			// (about once in 12 000 steps at 0.6), so take it when there.
			if _, _, pv, ok := d.permit(key); ok && strings.HasPrefix(pv.Field, "~") && d.chance(0.95) {
				digest, maker = pv.Digest, MakerOf(pv.Field)
			}
			d.eval("sem_discard.lua", SemCommonLua+SemDiscardLua, []string{pk, ek}, digest, maker, SemChannel(key))
		} else {
			digest, maker, slot, fence := d.digest(), d.attemptID(), 1+d.pick(limit), d.fence()
			if s, _, pv, ok := d.permit(key); ok && strings.HasPrefix(pv.Field, "~") && d.chance(0.6) {
				digest, maker, slot = pv.Digest, MakerOf(pv.Field), s
				if d.chance(0.7) { // about the value's own fence or the counter: below, at or above
					fence = pv.Fence
					if c, ok := d.m.Peek(SemFenceKey(key)); ok && c.Kind == "string" {
						n, _ := strconv.ParseInt(c.Str, 10, 64)
						fence = max(fence, n)
					}
					fence += int64(d.pick(4)) - 1
				}
			}
			confirm := func() any {
				return d.eval("sem_confirm.lua", SemCommonLua+SemConfirmLua, []string{pk, ek, SemFenceKey(key)},
					digest, maker, fence, FenceMargin.Milliseconds(), slot, d.ttl().Milliseconds(), SemChannel(key))
			}
			if outcome(confirm()) == "1" && d.chance(0.5) {
				confirm() // a twin's confirmation of the same fence: joined
			}
		}
	case 8:
		slot, v := d.pick(4), d.value()
		if s, raw, _, ok := d.permit(key); ok && d.chance(0.5) {
			slot, v = s, raw
		}
		d.eval("sem_unwait.lua", SemCommonLua+semUnwaitLua, []string{pk, ek, SemQueueKey(key)}, slot, v, SemChannel(key), d.publish())
	default:
		if d.chance(0.5) {
			d.eval("sem_leave.lua", semLeaveLua, []string{SemQueueKey(key), SemAliveKey(key)}, d.ticket().Id, SemChannel(key), d.publish())
		} else {
			d.eval("sem_heartbeat.lua", SemCommonLua+semHeartbeatLua, []string{pk, ek, SemQueueKey(key), SemAliveKey(key)},
				[]string{"gw1", "gw2", "old7"}[d.pick(3)], 200+d.pick(3000), []string{"gw1.1", "gw2.1", "old7", ""}[d.pick(4)])
		}
	}
}

// rawKey is mostly a key of the raw commands' own, sometimes one the
// scripts use (so types clash and scripts meet odd state).
func (d *diff) rawKey() string {
	if d.chance(0.1) {
		if d.f.IntN(5) == 0 {
			return []string{ForcedKey("c"), SemForcedKey("u")}[d.f.IntN(2)]
		}
		return []string{LockKey("c"), FenceKey("c"), QueueKey("c"), AliveKey("c"), SemPermitsKey("u"), SemExpiryKey("u"), SemFenceKey("u")}[d.pick(7)]
	}
	return []string{"r:s1", "r:s2", "r:h1", "r:z1", "r:z2"}[d.pick(5)]
}

func (d *diff) score() string {
	switch d.pick(8) {
	case 0:
		return []string{"-inf", "+inf", "inf", "1e3", "0.5", "-2.25", "nan", "x", "1.5e15", " 1", "0x10"}[d.pick(11)]
	case 1:
		return strconv.FormatFloat(d.r.Float64()*1000-500, 'f', -1, 64)
	}
	return strconv.Itoa(d.pick(20))
}

func (d *diff) bound() string {
	b := d.score()
	if d.chance(0.3) {
		b = "(" + b
	}
	return b
}

func (d *diff) intArg() string {
	switch d.pick(10) {
	case 0:
		return []string{"-1", "0", "x", "1.5", "01", "+3", "-0", "99999999999999999999", " 2"}[d.pick(9)]
	case 1:
		return strconv.FormatInt(d.now/1000+d.r.Int64N(2000)-1000, 10)
	}
	return strconv.Itoa(d.pick(3000))
}

// raw sends one command the scripts use, with its options, to both.
func (d *diff) raw() {
	d.raws++
	k := d.rawKey()
	m := func() string { return []string{"m1", "m2", "m3", "m4"}[d.pick(4)] }
	var argv []any
	switch d.pick(26) {
	case 0, 1:
		argv = []any{"GET", k}
	case 2, 3, 4:
		argv = []any{"SET", k, []string{"v1", "v2", "17"}[d.pick(3)]}
		for _, o := range [][]any{{"NX"}, {"XX"}, {"PX", d.intArg()}, {"KEEPTTL"}, {"EX", strconv.Itoa(d.pick(3))}} {
			if d.chance(0.25) {
				argv = append(argv, o...)
			}
		}
	case 5:
		argv = []any{"DEL", k, d.rawKey()}
	case 6:
		argv = []any{"EXISTS", k, k, d.rawKey()}
	case 7:
		argv = []any{"PEXPIRE", k, d.intArg()}
	case 8:
		argv = []any{"PEXPIREAT", k, d.intArg()}
	case 9:
		argv = []any{[]string{"PEXPIRETIME", "PTTL", "TYPE"}[d.pick(3)], k}
	case 10:
		argv = []any{"HSET", k, m(), d.intArg()}
		if d.chance(0.3) {
			argv = append(argv, m(), "v")
		}
		if d.chance(0.05) {
			argv = append(argv, "odd")
		}
	case 11:
		argv = []any{[]string{"HGET", "HEXISTS", "HDEL"}[d.pick(3)], k, m()}
	case 12:
		argv = []any{"HINCRBY", k, m(), d.intArg()}
	case 13, 14, 15:
		argv = []any{"ZADD", k}
		for _, o := range []string{"NX", "XX", "GT", "LT", "CH"} {
			if d.chance(0.12) {
				argv = append(argv, o)
			}
		}
		for range 1 + d.pick(2) {
			argv = append(argv, d.score(), m())
		}
	case 16:
		argv = []any{"ZREM", k, m(), m()}
	case 17:
		argv = []any{"ZRANGE", k, d.pick(5) - 2, d.pick(5) - 2}
		if d.chance(0.5) {
			argv = append(argv, "WITHSCORES")
		}
	case 18, 19:
		argv = []any{"ZRANGEBYSCORE", k, d.bound(), d.bound()}
		if d.chance(0.5) {
			argv = append(argv, "WITHSCORES")
		}
		if d.chance(0.4) {
			argv = append(argv, "LIMIT", d.pick(4)-1, d.pick(4)-1)
		}
	case 20:
		argv = []any{[]string{"ZREMRANGEBYSCORE", "ZCOUNT"}[d.pick(2)], k, d.bound(), d.bound()}
	case 21:
		argv = []any{[]string{"ZCARD", "ZSCORE", "ZRANK"}[d.pick(3)], k}
		if argv[0] != "ZCARD" {
			argv = append(argv, m())
		}
	case 22:
		argv = []any{"TIME"}
	case 23:
		argv = []any{[]string{"PUBLISH", "SPUBLISH"}[d.pick(2)], "ch", "msg"}
	case 24:
		argv = []any{"HINCRBY", k, m(), "9223372036854775807"}
	default:
		// The same commands from a script, with Lua numbers for arguments
		// (Redis writes them with %.17g).
		d.scripts++
		src := `return redis.pcall(ARGV[1], KEYS[1], tonumber(ARGV[2]) or ARGV[2], ARGV[3])`
		cmd := []string{"ZADD", "SET", "PEXPIRE", "HSET", "ZSCORE"}[d.pick(5)]
		argv = []any{"EVAL", src, 1, k, cmd, d.score(), m()}
		if cmd == "ZSCORE" {
			argv = []any{"EVAL", `return redis.call('ZSCORE', KEYS[1], ARGV[1])`, 1, k, m()}
		}
	}
	d.call("raw", argv...)
}

// probes are scripts that exercise the engine itself: conversions both
// ways, errors, globals, numbers.
var diffProbes = []string{
	`return {1, 2.9, -2.9, 'x', true, false, 3}`,
	`return {1, nil, 3}`,
	`return {ok = 'fine'}`,
	`return {err = 'MYERR custom'}`,
	`return redis.status_reply('DONE')`,
	`return redis.error_reply('OOPS no')`,
	`return redis.pcall('HGET', KEYS[1], 'f')`,
	`return redis.call('HGET', KEYS[1], 'f')`,
	`local r = redis.pcall('GET', KEYS[1]); if type(r) == 'table' then return r.err end; return r`,
	`return type(redis.call('GET', 'nope:missing'))`,
	`return redis.call('SET', KEYS[1], 'v')`,
	`local r = redis.call('SET', KEYS[1], 'v'); return r.ok`,
	`return redis.call('TIME')`,
	`return tostring(tonumber(redis.call('TIME')[1]) * 1000000)`,
	`return {tonumber('1e3'), tonumber(' 12 '), tonumber('0x10'), tonumber('z'), tonumber('5', 16)}`,
	`return string.format('%.0f', 1712345678901234.0)`,
	`return tostring(0.1) .. '|' .. tostring(1e15) .. '|' .. tostring(-0.5)`,
	`return x`,
	`y = 1`,
	`return redis.call('NOSUCH')`,
	`return redis.call('GET')`,
	`return redis.call('SET', KEYS[1], {})`,
	`return redis.call()`,
	`return {redis.call('PTTL', KEYS[1]), redis.call('PEXPIRETIME', KEYS[1])}`,
	`return math.floor(-2.5) .. ',' .. math.ceil(2.1) .. ',' .. math.max(1, 7, 3)`,
	`local _, n = string.gsub('a.b.c', '%.', ''); return n`,
	`return string.match('0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef:~x.y:12+3:o:w', '^[^:]*:([^:]*):(.*)$')`,
	`return #KEYS + #ARGV`,
	`return unpack({1, 2, 3})`,
	`return 9007199254740993`,
	`return -0.9`,
	`error('plain')`,
	`return redis.sha1hex('abc')`,
}

func (d *diff) probe() {
	d.probes++
	d.scripts++
	d.callProto("probe", d.chance(0.5), "EVAL", diffProbes[d.pick(len(diffProbes))], 1, d.rawKey(), "arg")
}

// compareState compares every live key of the two servers: type, value
// and expiry (ms), which the frozen clocks make exact.
func (d *diff) compareState(step int) {
	d.t.Helper()
	d.states++
	got := d.m.Dump()
	keys, err := d.c.Keys(d.ctx, "*").Result()
	require.NoError(d.t, err)
	sort.Strings(keys)
	want := map[string]luaredis.Value{}
	for _, k := range keys {
		typ, err := d.c.Type(d.ctx, k).Result()
		require.NoError(d.t, err)
		exp, err := d.c.Do(d.ctx, "PEXPIRETIME", k).Int64()
		require.NoError(d.t, err)
		v := luaredis.Value{Kind: typ, Expiry: exp}
		switch typ {
		case "string":
			v.Str, err = d.c.Get(d.ctx, k).Result()
		case "hash":
			v.Hash, err = d.c.HGetAll(d.ctx, k).Result()
		case "zset":
			var zs []redis.Z
			zs, err = d.c.ZRangeWithScores(d.ctx, k, 0, -1).Result()
			v.Zset = map[string]float64{}
			for _, z := range zs {
				v.Zset[z.Member.(string)] = z.Score
			}
		}
		if errors.Is(err, redis.Nil) { // expired between the reads: cannot, the clock is frozen
			err = fmt.Errorf("key %s vanished", k)
		}
		require.NoError(d.t, err)
		want[k] = v
	}
	d.keysSeen += len(want)
	if len(got) != len(want) {
		d.t.Errorf("step %d: luaredis has keys %v, redis %v", step, mapKeys(got), keys)
		return
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			d.t.Errorf("step %d: luaredis lacks key %s", step, k)
			continue
		}
		if g.Kind != w.Kind || g.Str != w.Str || g.Expiry != w.Expiry || !equalHash(g.Hash, w.Hash) || !equalZset(g.Zset, w.Zset) {
			d.t.Errorf("step %d: key %s differs\nluaredis: %+v\nredis:    %+v", step, k, g, w)
		}
	}
}

func mapKeys(m map[string]luaredis.Value) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func equalHash(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func equalZset(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || (v != w && !(math.IsNaN(v) && math.IsNaN(w))) {
			return false
		}
	}
	return true
}
