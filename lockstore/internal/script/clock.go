package script

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/redis/go-redis/v9"
)

// Rule D of docs/safety.md ("Late grants and late deletes"): a script
// that grants or deletes carries a deadline in its server's clock that has
// passed before the gateway can answer 503 for it, and that server's run
// id, so a grant or a delete that lands after its 503, or on another
// server, writes nothing. This file is the gateway's side; deadline.lua, in
// front of those scripts (Sources, Deadlined), is the server's.

var (
	//go:embed lua/deadline.lua
	DeadlineLua string

	//go:embed lua/clock.lua
	ClockLua    string
	ClockScript = redis.NewScript(ClockLua)
)

const (
	// clockRate is A3 of docs/safety.md: a server's clock runs at least
	// this fast against the gateway's.
	clockRate = 0.99
	// clockRefresh is the longest a sample is used before it is taken
	// again; it is also capped at five call timeouts, so that the drift
	// allowance (1% of the sample's age) stays small against one call.
	clockRefresh = 2 * time.Second

	LateReply  = "LOCKGW_LATE"
	ClockReply = "LOCKGW_CLOCK"
)

// Drift is rule E's allowance (docs/safety.md) for a lease or permit of
// ttl: a node's clock may run up to 1% faster than the gateway's (A3), and
// keeps expiries in whole milliseconds.
func Drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// GrantEnd is the expires_at a holder is told for a grant, a renewal or
// an extend of ttl whose first script was sent after start (rule E): never
// later than the moment a node lets it go.
func GrantEnd(start time.Time, ttl time.Duration) time.Time { return start.Add(ttl - Drift(ttl)) }

// clockSample is one reading of a server's clock: its run id and TIME
// (µs), and the gateway's clock when the reply arrived.
type ClockSample struct {
	Run string
	Us  int64
	At  time.Time
}

// serverClock is the latest sample of one server.
type serverClock struct {
	mu       sync.Mutex
	S        ClockSample
	sampling bool // one caller takes the next sample; the others use s meanwhile
}

// clocks keeps the samples of the servers one store sends grants and
// deletes to, and makes each call's deadline.
type Clocks struct {
	timeout time.Duration // a call's give-up when its context has no earlier deadline
	refresh time.Duration
	cluster bool // servers by slot; otherwise one server for every key
	// now and sleepUntil are the gateway's clock (the simulator's, in its
	// tests).
	Now        func() time.Time
	SleepUntil func(time.Time)

	mu     sync.Mutex
	bySlot map[int]*serverClock
	byRun  map[string]*serverClock
}

func NewClocks(timeout time.Duration, cluster bool) *Clocks {
	return &Clocks{
		timeout: timeout, refresh: min(clockRefresh, max(5*timeout, 100*time.Millisecond)), cluster: cluster,
		Now: time.Now, SleepUntil: func(t time.Time) { time.Sleep(time.Until(t)) },
		bySlot: map[int]*serverClock{}, byRun: map[string]*serverClock{},
	}
}

func (c *Clocks) Server(key string) *serverClock {
	slot := 0
	if c.cluster {
		slot = ClusterSlot(key)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	sc := c.bySlot[slot]
	if sc == nil {
		sc = &serverClock{}
		c.bySlot[slot] = sc
	}
	return sc
}

// forget drops what is known of the server of key: a call found another
// server there.
func (c *Clocks) Forget(key string) {
	slot := 0
	if c.cluster {
		slot = ClusterSlot(key)
	}
	c.mu.Lock()
	delete(c.bySlot, slot)
	c.mu.Unlock()
}

// deadline is rule D's argument for a call on key sent now through sc,
// and the moment from which the gateway may answer 503 for it.
func (c *Clocks) Deadline(ctx context.Context, sc redis.Scripter, key string) (arg string, giveUp time.Time, err error) {
	now := c.Now()
	giveUp = now.Add(c.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(giveUp) {
		giveUp = d
	}
	s, err := c.sample(ctx, sc, key, now)
	if err != nil {
		return "", giveUp, err
	}
	us := s.Us + int64(clockRate*float64(giveUp.Sub(s.At).Microseconds()))
	return s.Run + ":" + strconv.FormatInt(us, 10), giveUp, nil
}

// sample is a fresh enough sample of key's server: the one it has, or a
// new one. While one caller takes a new sample, the others use the one
// before it as long as it is younger than three refreshes (the deadline
// allows for its age).
func (c *Clocks) sample(ctx context.Context, sc redis.Scripter, key string, now time.Time) (ClockSample, error) {
	srv := c.Server(key)
	srv.mu.Lock()
	s, age := srv.S, now.Sub(srv.S.At)
	if s.Run != "" && (age < c.refresh || srv.sampling && age < 3*c.refresh) {
		srv.mu.Unlock()
		return s, nil
	}
	srv.sampling = true
	srv.mu.Unlock()
	defer func(srv *serverClock) { // the one marked, even when srv is shared below
		srv.mu.Lock()
		srv.sampling = false
		srv.mu.Unlock()
	}(srv)
	reply, err := ClockScript.Run(ctx, sc, []string{key}).Slice()
	if err != nil {
		return ClockSample{}, RedisErr(err)
	}
	at := c.Now()
	if len(reply) != 3 {
		return ClockSample{}, fmt.Errorf("lockstore: clock script replied %v", reply)
	}
	run, _ := reply[0].(string)
	sec, _ := reply[1].(int64)
	usec, _ := reply[2].(int64)
	if run == "" {
		return ClockSample{}, fmt.Errorf("lockstore: clock script replied %v: no run id", reply)
	}
	s = ClockSample{Run: run, Us: sec*1_000_000 + usec, At: at}
	c.mu.Lock()
	if known := c.byRun[run]; known != nil && known != srv {
		// The slot moved to a server sampled through another slot: share
		// its sample from now on.
		c.bySlot[c.slotOf(key)] = known
		srv = known
	} else {
		c.byRun[run] = srv
	}
	c.mu.Unlock()
	srv.mu.Lock()
	srv.S = s
	srv.mu.Unlock()
	return s, nil
}

func (c *Clocks) slotOf(key string) int {
	if c.cluster {
		return ClusterSlot(key)
	}
	return 0
}

// settle returns once the gateway may answer 503 for a call that failed
// with err: at once when the call cannot land later (its server
// answered, or it was never sent), else at giveUp, when the call's
// deadline has passed on its server.
func (c *Clocks) Settle(err error, giveUp time.Time) {
	if err == nil || !mayLand(err) {
		return
	}
	if c.Now().Before(giveUp) {
		c.SleepUntil(giveUp)
	}
}

// mayLand says whether a call that failed with err may still run on its
// server: anything but an answer from the server (an error reply, or a
// refusal made of one), a connection that could not be made, or a pool
// with no connection to give. A reset or a closed connection may: a proxy
// on the way can still deliver what it had read.
func mayLand(err error) bool {
	var rerr redis.Error
	var refused *lockstore.RefusedError // the node answered (lockstore/redlock/nodeset.go turns its answer into one)
	if errors.As(err, &rerr) || errors.As(err, &refused) {
		return false
	}
	if errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	return true
}

// deadlined are the scripts rule D applies to, by hash: those with
// deadline.lua in front (Sources).
var deadlined = map[string]bool{}

func init() {
	for name, src := range Sources {
		if Deadlined(name) {
			deadlined[Sha1Hex(src)] = true
		}
	}
}

// Clocked is a Scripter whose grants and deletes (Deadlined) carry rule
// D's deadline, appended to their arguments; other scripts pass as they
// are. Those scripts must go through one: deadline.lua takes their last
// argument.
type Clocked struct {
	redis.Scripter
	Clocks *Clocks
}

func (g Clocked) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if !deadlined[sha] {
		return g.Scripter.EvalSha(ctx, sha, keys, args...)
	}
	return g.run(ctx, keys, func(ctx context.Context, arg string) *redis.Cmd {
		return g.Scripter.EvalSha(ctx, sha, keys, append(slices.Clip(args), arg)...)
	})
}

// Eval is redis.Script.Run's fallback after NOSCRIPT.
func (g Clocked) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	if !deadlined[Sha1Hex(src)] {
		return g.Scripter.Eval(ctx, src, keys, args...)
	}
	return g.run(ctx, keys, func(ctx context.Context, arg string) *redis.Cmd {
		return g.Scripter.Eval(ctx, src, keys, append(slices.Clip(args), arg)...)
	})
}

// run makes a grant's or a delete's call with its deadline: once more,
// after a new sample, when it reached another server than the one sampled
// (it wrote nothing there); and when it, or any copy of it the client sent
// (CopyHook), failed in a way that may still land, it returns only once
// the deadline has passed.
func (g Clocked) run(ctx context.Context, keys []string, call func(ctx context.Context, arg string) *redis.Cmd) *redis.Cmd {
	key := keys[0]
	for try := 0; ; try++ {
		arg, giveUp, err := g.Clocks.Deadline(ctx, g.Scripter, key)
		if err != nil {
			cmd := redis.NewCmd(ctx)
			cmd.SetErr(err)
			return cmd
		}
		// Only a Cluster client sends copies (CopyHook); other clients
		// send a call once, and pay nothing for this.
		callCtx, copies := ctx, (*copiesLanding)(nil)
		if g.Clocks.cluster {
			copies = &copiesLanding{}
			callCtx = context.WithValue(ctx, copiesKey{}, copies)
		}
		cmd := call(callCtx, arg)
		if copies != nil && copies.unsettled(cmd.Err()) {
			// A copy the client sent before the one that answered broke
			// on its way and may still run: answer only once its deadline
			// has passed, whatever the last copy said.
			if g.Clocks.Now().Before(giveUp) {
				g.Clocks.SleepUntil(giveUp)
			}
			return cmd
		}
		if try == 0 && IsReply(cmd.Err(), ClockReply) {
			g.Clocks.Forget(key)
			continue
		}
		g.Clocks.Settle(cmd.Err(), giveUp)
		return cmd
	}
}

// copiesLanding is set, through a call's context, when a copy of the call
// failed in a way that may still land (mayLand). go-redis's ClusterClient
// sends a command again after an EOF or a reset (its redirect loop, which
// MaxRetries does not turn off), and its caller sees the last copy's
// outcome only; an earlier copy can still reach Redis (a proxy that had
// read it), before its deadline, after the last copy was answered.
type copiesLanding struct{ may, seen atomic.Bool }

type copiesKey struct{}

// unsettled says whether the call, which ended with err, may still have a
// copy to land: one broke on its way, or a node answered without CopyHook
// seeing it (a client that ran commands before the store was made, whose
// node clients lack the hook), so its copies cannot be known.
func (c *copiesLanding) unsettled(err error) bool {
	return c.may.Load() || !c.seen.Load() && (err == nil || !mayLand(err))
}

// CopyHook, on each node client of a ClusterClient (OnNewNode), marks the
// call of a copy that failed in a way that may still land.
type CopyHook struct{}

func (CopyHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (CopyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		markCopy(ctx, err)
		return err
	}
}

// ProcessPipelineHook: the Cluster client sends a copy after -ASK as a
// pipeline of ASKING and the command.
func (CopyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		markCopy(ctx, err)
		for _, cmd := range cmds {
			markCopy(ctx, cmd.Err())
		}
		return err
	}
}

func markCopy(ctx context.Context, err error) {
	if c, ok := ctx.Value(copiesKey{}).(*copiesLanding); ok {
		c.seen.Store(true)
		if err != nil && mayLand(err) {
			c.may.Store(true)
		}
	}
}

// isReply says whether err is the server's error reply starting with code.
func IsReply(err error, code string) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), code)
}
