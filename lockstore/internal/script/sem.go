package script

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/redis/go-redis/v9"
)

// Semaphores on Redis: the layout, and why slots, are in
// lua/sem_common.lua, which every sem_*.lua script starts with.

var (
	//go:embed lua/sem_common.lua
	SemCommonLua string

	//go:embed lua/sem_acquire.lua
	SemAcquireLua    string
	SemAcquireScript = redis.NewScript(DeadlineLua + SemCommonLua + SemAcquireLua) // rule D: clock.go

	//go:embed lua/sem_extend.lua
	SemExtendLua    string
	SemExtendScript = redis.NewScript(SemCommonLua + SemExtendLua)

	//go:embed lua/sem_release.lua
	SemReleaseLua    string
	SemReleaseScript = redis.NewScript(DeadlineLua + SemCommonLua + SemReleaseLua) // rule D: clock.go

	//go:embed lua/sem_read.lua
	SemReadLua    string
	SemReadScript = redis.NewScript(SemCommonLua + SemReadLua)

	//go:embed lua/sem_inspect.lua
	SemInspectLua    string
	SemInspectScript = redis.NewScript(SemCommonLua + SemInspectLua)

	//go:embed lua/sem_discard.lua
	SemDiscardLua    string
	SemDiscardScript = redis.NewScript(SemCommonLua + SemDiscardLua)

	//go:embed lua/sem_confirm.lua
	SemConfirmLua    string
	SemConfirmScript = redis.NewScript(DeadlineLua + SemCommonLua + SemConfirmLua) // rule D: clock.go

	//go:embed lua/sem_unwait.lua
	semUnwaitLua    string
	SemUnwaitScript = redis.NewScript(DeadlineLua + SemCommonLua + semUnwaitLua) // rule D: clock.go

	//go:embed lua/sem_leave.lua
	semLeaveLua    string
	SemLeaveScript = redis.NewScript(semLeaveLua)
)

// A semaphore's Redis keys share the hash tag {sem#<key>}: one Cluster
// slot, apart from the lock of the same name. '#' is not in the key
// alphabet, so no lock's keys can be a semaphore's: with "{sem:<key>}",
// the lock "sem:x" shared its fence counter, queue and channel with the
// semaphore "x" (each overwrote the other's counter, and their waiters
// queued as one).
const SemTag = "sem#"

func SemPermitsKey(key string) string { return "lockgw:{" + SemTag + key + "}:permits" }

func SemExpiryKey(key string) string { return "lockgw:{" + SemTag + key + "}:expiry" }

func SemFenceKey(key string) string { return "lockgw:{" + SemTag + key + "}:fence" }

func SemQueueKey(key string) string { return "lockgw:{" + SemTag + key + "}:queue" }

func SemAliveKey(key string) string { return "lockgw:{" + SemTag + key + "}:alive" }

// SemForcedKey is the semaphore's forced releases (sem_release.lua,
// KEYS[4]), as ForcedKey is a lock's.
func SemForcedKey(key string) string { return "lockgw:{" + SemTag + key + "}:forced" }

func SemChannel(key string) string { return "lockgw:{" + SemTag + key + "}:released" }

// The nodeSem* functions run one semaphore script on one Redis node, for
// Redis and for each of Redlock's nodes.

type semCode int64

const (
	SemRefused  semCode = 0
	SemNew      semCode = 1
	SemRenewed  semCode = 2
	SemMismatch semCode = 5
	SemElsewise semCode = 6 // Redlock: the token holds another slot here
)

// semArgs is what one sem_acquire.lua call needs besides the key.
type SemArgs struct {
	Digest  string
	Ttl     time.Duration
	Owner   string
	Limit   int
	Slot    int    // 0: any free slot (Redis)
	Attempt string // Redlock's round id; "" for Redis
	Seed    int64  // Redlock's fence seed (µs); 0: Redis TIME
	// provisional: how long a new Redlock value lives until a round
	// confirms it (Redlock.provisional); 0 for Redis.
	Provisional time.Duration
	Ticket      WaitTicket
	Publish     string
}

type SemResult struct {
	Code      semCode
	Value     SemValue      // granted or renewed
	Slot      int           // granted, renewed, elsewise
	Remaining time.Duration // refused, mismatch
	Head      bool          // refused
	FreeCount int           // refused: how many permits are free on this node
	Free      []int         // refused: some free slots on this node (Redlock)
	Limit     int           // mismatch: the holders' limit
	asked     int           // the limit asked for
	Floor     int64         // renewed (Redlock): the vote the node would cast now
}

// permit is the caller's answer from a node's reply: the permit, or the
// error a refusal or a mismatch means.
func (r SemResult) Permit(key string, req lockstore.PermitRequest, start time.Time) (lockstore.Permit, error) {
	switch r.Code {
	case SemNew, SemRenewed:
		p := r.Value.Permit(key, req.Token, req.Limit, start)
		p.Renewed = r.Code == SemRenewed
		return p, nil
	case SemMismatch:
		return lockstore.Permit{}, &lockstore.LimitMismatchError{Limit: r.Limit, Remaining: r.Remaining}
	}
	return lockstore.Permit{}, &lockstore.FullError{Limit: req.Limit, Remaining: r.Remaining}
}

func SemAcquire(ctx context.Context, c Clocked, key string, a SemArgs) (SemResult, error) {
	keys := []string{SemPermitsKey(key), SemExpiryKey(key), SemFenceKey(key), SemQueueKey(key), SemAliveKey(key)}
	args := []any{a.Digest, a.Ttl.Milliseconds(), a.Owner, a.Limit, a.Slot, a.Attempt, a.Seed,
		FenceMargin.Milliseconds(), a.Ticket.Id, a.Ticket.Heartbeat.Milliseconds(), SemChannel(key), cmp.Or(a.Publish, PublishAll),
		a.Provisional.Milliseconds()}
	reply, err := SemAcquireScript.Run(ctx, c, keys, args...).Slice()
	if err != nil {
		return SemResult{}, RedisErr(err)
	}
	bad := fmt.Errorf("lockstore: sem_acquire script replied %v", reply)
	if len(reply) < 2 {
		return SemResult{}, bad
	}
	code, _ := reply[0].(int64)
	r := SemResult{Code: semCode(code), asked: a.Limit}
	switch r.Code {
	case SemNew, SemRenewed:
		if len(reply) != 3 && len(reply) != 4 {
			return SemResult{}, bad
		}
		slot, _ := reply[2].(int64)
		r.Slot = int(slot)
		if len(reply) == 4 {
			fs, _ := reply[3].(string)
			r.Floor, _ = strconv.ParseInt(fs, 10, 64)
		}
		r.Value, err = ParseSemValue(r.Slot, reply[1])
		return r, err
	case SemRefused:
		ms, _ := reply[1].(int64)
		r.Remaining = pttlDuration(ms)
		r.Head = len(reply) > 2 && reply[2] == int64(1)
		if len(reply) > 3 {
			free, _ := reply[3].(int64)
			r.FreeCount = int(free)
		}
		for _, f := range reply[min(4, len(reply)):] {
			if s, ok := f.(int64); ok {
				r.Free = append(r.Free, int(s))
			}
		}
		return r, nil
	case SemMismatch:
		limit, _ := reply[1].(int64)
		r.Limit = int(limit)
		if len(reply) > 2 {
			ms, _ := reply[2].(int64)
			r.Remaining = pttlDuration(ms)
		}
		return r, nil
	case SemElsewise:
		slot, _ := reply[1].(int64)
		r.Slot = int(slot)
		return r, nil
	}
	return SemResult{}, bad
}

// nodeSemExtend resets the TTL of digest's permit; with longer (Redlock)
// it only ever lengthens it.
func SemExtend(ctx context.Context, c redis.Scripter, key, digest string, ttl time.Duration, longer bool, publish string) (SemValue, error) {
	keys, args := SemExtendArgs(key, digest, ttl, longer, publish)
	return SemExtendRead(SemExtendScript.Run(ctx, c, keys, args...))
}

// SemExtendRead reads the answer to sem_extend.lua: cmd's reply, or its
// error.
func SemExtendRead(cmd *redis.Cmd) (SemValue, error) {
	reply, err := cmd.Slice()
	if err != nil {
		return SemValue{}, RedisErr(err)
	}
	return SemExtendReply(reply)
}

// semExtendArgs are sem_extend.lua's keys and arguments.
func SemExtendArgs(key, digest string, ttl time.Duration, longer bool, publish string) ([]string, []any) {
	keys, args := []string{SemPermitsKey(key), SemExpiryKey(key), SemForcedKey(key)}, []any{digest, ttl.Milliseconds(), ""}
	if longer {
		args[2] = "1"
	}
	return keys, append(args, cmp.Or(publish, PublishAll))
}

// semExtendReply reads sem_extend.lua's reply.
func SemExtendReply(reply []any) (SemValue, error) {
	if len(reply) == 0 {
		return SemValue{}, fmt.Errorf("lockstore: sem_extend script replied %v", reply)
	}
	if err, ok := extendRefusal(reply); ok {
		return SemValue{}, err
	}
	code, _ := reply[0].(int64)
	switch {
	case code == 1 && len(reply) == 4:
		slot, _ := reply[2].(int64)
		limit, _ := reply[3].(int64)
		v, err := ParseSemValue(int(slot), reply[1])
		v.Limit = int(limit)
		return v, err
	}
	return SemValue{}, fmt.Errorf("lockstore: sem_extend script replied %v", reply)
}

// nodeSemReleaseAsRead releases digest's permit on one node in two steps,
// as Redis.Release does a lock's (docs/safety.md, "Late writes on redis",
// rule V2): it reads the permit, then deletes it only as read. When a
// write of the same token changed it in between, it reads again, a few
// times.
func SemReleaseAsRead(ctx context.Context, c Clocked, key, digest, publish string, fence int64) error {
	for range ReleaseReads {
		v, err := SemRead(ctx, c, key, digest)
		if err != nil {
			return err
		}
		if fence != 0 && v.Fence != fence {
			// A forced release of the permit of fence: the token's permit
			// now is another (review fix).
			return lockstore.ErrNotHeld
		}
		v.Forced = fence != 0 // only a forced release names the fence
		if err := SemRelease(ctx, c, key, digest, publish, v); !errors.Is(err, ErrMoved) {
			return err
		}
	}
	return fmt.Errorf("%w: the permit kept changing while it was released (a renewal or an extend of the same token at the same time); release again", lockstore.ErrUnavailable)
}

// nodeSemRead reads digest's permit on one node (sem_read.lua).
func SemRead(ctx context.Context, c redis.Scripter, key, digest string) (SemValue, error) {
	reply, err := SemReadScript.Run(ctx, c, []string{SemPermitsKey(key), SemExpiryKey(key)}, digest).Slice()
	if err != nil {
		return SemValue{}, RedisErr(err)
	}
	if len(reply) == 2 {
		slot, _ := reply[1].(int64)
		return ParseSemValue(int(slot), reply[0])
	}
	if len(reply) == 1 {
		switch reply[0] {
		case int64(0):
			return SemValue{}, lockstore.ErrNotHeld
		case int64(-1):
			return SemValue{}, lockstore.ErrTokenMismatch
		}
	}
	return SemValue{}, fmt.Errorf("lockstore: sem_read script replied %v", reply)
}

// nodeSemRelease deletes digest's permit if it is still v, as read.
func SemRelease(ctx context.Context, c Clocked, key, digest, publish string, v SemValue) error {
	keys, args := SemReleaseCall(key, digest, publish, v)
	code, err := SemReleaseScript.Run(ctx, c, keys, args...).Int64()
	if err != nil {
		return RedisErr(err)
	}
	return ReleaseCode(code)
}

// SemReleaseCall is sem_release.lua's KEYS and ARGV: delete digest's
// permit on key if it is still v; v.Forced: a forced release.
func SemReleaseCall(key, digest, publish string, v SemValue) (keys []string, args []any) {
	f := "0"
	if v.Forced {
		f = "1"
	}
	return []string{SemPermitsKey(key), SemExpiryKey(key), SemQueueKey(key), SemForcedKey(key)},
		[]any{digest, SemChannel(key), cmp.Or(publish, PublishAll), v.Raw, f}
}

// nodeSemInspect reads a semaphore's permits on one node.
func SemInspect(ctx context.Context, c redis.Scripter, key string) (int, []SemValue, error) {
	reply, err := SemInspectScript.Run(ctx, c, []string{SemPermitsKey(key), SemExpiryKey(key)}).Slice()
	if err != nil {
		return 0, nil, RedisErr(err)
	}
	if len(reply) == 0 {
		return 0, nil, lockstore.ErrNotHeld
	}
	if len(reply) < 4 || len(reply)%2 != 0 {
		return 0, nil, fmt.Errorf("lockstore: sem_inspect script replied %d items", len(reply))
	}
	limit, _ := reply[0].(int64)
	now, _ := reply[1].(int64)
	var vs []SemValue
	for i := 2; i < len(reply); i += 2 {
		slot, _ := reply[i].(int64)
		v, err := ParseSemValue(int(slot), reply[i+1])
		if err != nil {
			return 0, nil, err
		}
		v.Left = pttlDuration(v.exp - now)
		vs = append(vs, v)
	}
	return int(limit), vs, nil
}

// semValue is a permit's stored value, parsed (lua/sem_common.lua):
// "<expiry ms>:<digest>:<field>:<fence>+<ms>:<owner>".
type SemValue struct {
	Slot   int
	Raw    string // the stored value as read
	exp    int64  // Redis TIME, ms
	Digest string
	Field  string // "-" on Redis, the attempt field on Redlock
	Fence  int64
	// confirmed: a Redlock round confirmed the fence ("+0<ms>",
	// sem_confirm.lua).
	Confirmed bool
	Length    time.Duration
	Owner     string
	Left      time.Duration // from nodeSemInspect
	Limit     int           // from nodeSemExtend: the limit the hash records
	// Forced, for a release (sem_release.lua ARGV[5]): a forced release,
	// which records the digest it deletes for the holder's renewals.
	Forced bool
}

// provisional says whether v is a Redlock round's value that no round
// confirmed yet: no permit, until one does (docs/safety.md, rule A).
func (v SemValue) Provisional() bool {
	return strings.HasPrefix(v.Field, "~") && !v.Confirmed
}

func ParseSemValue(slot int, reply any) (SemValue, error) {
	s, ok := reply.(string)
	if !ok {
		return SemValue{}, fmt.Errorf("lockstore: permit value is %T, not a string", reply)
	}
	parts := strings.SplitN(s, ":", 5)
	if len(parts) != 5 || len(parts[1]) != 64 {
		return SemValue{}, errors.New("lockstore: malformed permit value")
	}
	fence, length, _ := strings.Cut(parts[3], "+")
	exp, err1 := strconv.ParseInt(parts[0], 10, 64)
	f, err2 := strconv.ParseInt(fence, 10, 64)
	ms, err3 := strconv.ParseInt(length, 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return SemValue{}, fmt.Errorf("lockstore: malformed permit value: %w", err)
	}
	return SemValue{Slot: slot, Raw: s, exp: exp, Digest: parts[1], Field: parts[2], Fence: f,
		Confirmed: strings.HasPrefix(length, "0"), Length: time.Duration(ms) * time.Millisecond, Owner: parts[4]}, nil
}

// Permit is the permit a grant, a renewal or an extend left, of the
// value's recorded length, as its holder is told it: start was read before
// the script ran (rule E).
func (v SemValue) Permit(key, token string, limit int, start time.Time) lockstore.Permit {
	return lockstore.Permit{Key: key, Token: token, Owner: v.Owner, Limit: limit, Fence: v.Fence,
		Granted: v.Length, ExpiresAt: GrantEnd(start, v.Length)}
}

// Found is the permit as a read found it, Left left by the node's clock
// when the read ran after start: what the node said, no allowance (as
// LockValue.Found).
func (v SemValue) Found(key string, limit int, start time.Time) lockstore.Permit {
	return lockstore.Permit{Key: key, Owner: v.Owner, Limit: limit, Fence: v.Fence,
		Granted: v.Length, Left: v.Left, ExpiresAt: start.Add(v.Left)}
}
