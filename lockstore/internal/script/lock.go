package script

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/redis/go-redis/v9"
)

// FenceMargin bounds what a key leaves in Redis: its fence counter lives
// until the key's lease ends and Redis TIME has passed the counter, plus
// FenceMargin, so a released key is gone from Redis a second later. Fences
// are seeded from the clock, and a counter expires only once the clock is
// FenceMargin past it, so the next grant's fence is still higher, unless the
// clock steps back by more than FenceMargin (docs/safety.md, "Fences").
const FenceMargin = time.Second

var (
	//go:embed lua/acquire.lua
	AcquireLua    string
	AcquireScript = redis.NewScript(DeadlineLua + AcquireLua) // rule D: clock.go

	//go:embed lua/extend.lua
	ExtendLua    string
	ExtendScript = redis.NewScript(ExtendLua)

	//go:embed lua/release.lua
	ReleaseLua    string
	ReleaseScript = redis.NewScript(DeadlineLua + ReleaseLua) // rule D: clock.go

	//go:embed lua/inspect.lua
	InspectLua    string
	InspectScript = redis.NewScript(InspectLua)

	//go:embed lua/leave.lua
	leaveLua    string
	LeaveScript = redis.NewScript(leaveLua)
)

// releaseReads bounds how often a release reads a lease that requests of
// the same token keep changing under it.
const ReleaseReads = 3

// counting is what acquire.lua needs to count a grant against a user:
// the cap (0: count nothing new), the caller's user and the user the caller
// believes its lock counts against if it renews it, both escaped.
type counting struct {
	Max          int
	User, Holder string
}

func NewCounting(ctx context.Context, q lockstore.Quota) counting {
	if q.Max > 0 {
		u := EscapeUser(q.User)
		return counting{Max: q.Max, User: u, Holder: u}
	}
	return counting{Holder: EscapeUser(lockstore.UserHint(ctx))}
}

// on: the call passes quota sets. Without a cap or a hint it passes none,
// so that a deployment without quotas never names a key outside the
// lock's Redis Cluster slot.
func (c counting) on() bool { return c.Max > 0 || c.Holder != "" }

// quotaKey is the set of a user's live locks (escaped user; see
// acquire.lua, "Counting"). Its hash tag is the user's, apart from every
// lock's: one script cannot touch both on a Redis Cluster.
func QuotaKey(escapedUser string) string { return "lockgw:{quota:" + escapedUser + "}:locks" }

// quotaKeys appends holder's quota set to a release's or an extend's keys;
// with no holder known, the script names it if the lock counts against one.
func QuotaKeys(keys []string, holder string) []string {
	if holder == "" {
		return keys
	}
	return append(keys, QuotaKey(holder))
}

// elsewhere reads a script's "counts against user, call again" reply.
func Elsewhere(reply []any, code int64) (string, bool) {
	if len(reply) != 2 || reply[0] != code {
		return "", false
	}
	user, ok := reply[1].(string)
	return user, ok && user != ""
}

// readyKey is what Ping writes; lock keys always carry a hash tag.
const ReadyKey = "lockgw:ready"

// The node* functions run one script on one Redis node and translate its
// reply into the domain's terms. Redis uses them on its only node; Redlock
// uses them on each of its nodes.

type acquireCode int64

const (
	AcquireHeld      acquireCode = 0
	AcquireNew       acquireCode = 1
	AcquireRenewed   acquireCode = 2
	AcquireElsewhere acquireCode = 3 // the renewed lock counts against another user's set
	AcquireOverQuota acquireCode = 4
)

type AcquireResult struct {
	Code      acquireCode
	Value     LockValue     // when granted or renewed
	Remaining time.Duration // when held by another
	Head      bool          // when held: the caller is first in the wait queue
	// NoExpiry, when held: the key has no expiry (PTTL -1), which no
	// script of the gateway's leaves, so a hand-made one: nothing to wake
	// a waiter but its release.
	NoExpiry bool
	User     string              // when elsewhere: whom the lock counts against
	CapErr   *lockstore.CapError // when over quota
}

// waitTicket places a waiting caller in a key's queue; the zero value is a
// caller that does not wait.
type WaitTicket struct {
	Id        string
	Heartbeat time.Duration
}

func (r AcquireResult) Lease(key, token string, ttl time.Duration, start time.Time) lockstore.Lease {
	l := r.Value.Lease(key, token, ttl, start)
	l.Renewed = r.Code == AcquireRenewed
	return l
}

// acquireArgs is what one acquire script call needs besides the key.
type AcquireArgs struct {
	Digest string
	Ttl    time.Duration
	Owner  string
	Ticket WaitTicket
	// seed, when positive, replaces Redis TIME as the fence seed (µs).
	Seed int64
	// attempt is a Redlock round's id ("" for Redis): a value the round
	// makes records it as its maker, and lives provisional until a round
	// confirms it (confirm.lua).
	Attempt     string
	Provisional time.Duration
	// quota counts the grant against a user (Redis only).
	Quota counting
	// publish is SPUBLISH on a Cluster; "" (PUBLISH) elsewhere.
	Publish string
	// holdAtLeast: a new grant keeps the key this long at least (rule L).
	HoldAtLeast time.Duration
}

// call is acquire.lua's KEYS and ARGV for key: one layout for every
// setup (the script's header names each).
func (a AcquireArgs) Call(key string) (keys []string, args []any) {
	keys = []string{LockKey(key), FenceKey(key), QueueKey(key), AliveKey(key)}
	cap, user := 0, ""
	switch {
	case a.Publish == PublishShard:
		// On a Cluster the caller counts (lockstore/redis/cluster_quota.go); the script
		// only records the user (or refuses a new grant: max -1).
		cap, user = a.Quota.Max, a.Quota.User
	case a.Quota.on():
		counted := a.Quota.User
		if a.Quota.Max == 0 { // counts nothing new: the set only fills the place
			counted = a.Quota.Holder
		}
		keys = append(keys, QuotaKey(counted), QuotaKey(a.Quota.Holder))
		cap, user = a.Quota.Max, a.Quota.User
	}
	args = []any{a.Digest, a.Ttl.Milliseconds(), a.Owner, FenceMargin.Milliseconds(),
		a.Ticket.Id, a.Ticket.Heartbeat.Milliseconds(), Channel(key), a.Seed,
		a.Attempt, a.Provisional.Milliseconds(), cap, user, cmp.Or(a.Publish, PublishAll), a.HoldAtLeast.Milliseconds(),
		quotaApart(a.Publish)}
	return keys, args
}

func Acquire(ctx context.Context, c Clocked, key string, a AcquireArgs) (AcquireResult, error) {
	keys, args := a.Call(key)
	reply, err := AcquireScript.Run(ctx, c, keys, args...).Slice()
	if err != nil {
		return AcquireResult{}, RedisErr(err)
	}
	return AcquireReply(reply, a)
}

func AcquireReply(reply []any, a AcquireArgs) (AcquireResult, error) {
	if len(reply) < 2 {
		return AcquireResult{}, fmt.Errorf("lockstore: acquire script replied %v", reply)
	}
	code, _ := reply[0].(int64)
	switch acquireCode(code) {
	case AcquireHeld:
		pttl, _ := reply[1].(int64)
		head := len(reply) == 3 && reply[2] == int64(1)
		return AcquireResult{Code: AcquireHeld, Remaining: pttlDuration(pttl), Head: head, NoExpiry: pttl == -1}, nil
	case AcquireNew, AcquireRenewed:
		v, err := ParseLockValue(reply[1])
		if len(reply) == 3 { // the expiry the script left (rule V3)
			v.Expiry, _ = reply[2].(int64)
		}
		return AcquireResult{Code: acquireCode(code), Value: v}, err
	case AcquireElsewhere:
		if user, ok := Elsewhere(reply, int64(AcquireElsewhere)); ok {
			return AcquireResult{Code: AcquireElsewhere, User: user}, nil
		}
	case AcquireOverQuota:
		ms, _ := reply[1].(int64)
		return AcquireResult{Code: AcquireOverQuota, CapErr: &lockstore.CapError{Err: lockstore.ErrUserQuota, Max: a.Quota.Max, Next: pttlDuration(ms)}}, nil
	}
	return AcquireResult{}, fmt.Errorf("lockstore: acquire script replied %v", reply)
}

// ExtendArgs is what one extend.lua call needs besides the key.
type ExtendArgs struct {
	Digest string
	// TTL is the new length from now; 0: the lease's own.
	TTL time.Duration
	// Holder is the quota user (escaped) the caller believes the lock
	// counts against, whose set the script moves the count in; "" none.
	Holder string
	// Longer (Redlock): only ever lengthen, and a provisional value is no
	// lease to extend (ARGV[3]).
	Longer bool
	// QuotaApart (Redis Cluster): the user's set lives in another slot, so
	// the script leaves the count to the caller (ARGV[4]).
	QuotaApart bool
}

// Call is extend.lua's KEYS and ARGV for key (its header names each).
func (a ExtendArgs) Call(key string) (keys []string, args []any) {
	keys = QuotaKeys([]string{LockKey(key), ForcedKey(key)}, a.Holder)
	args = []any{a.Digest, a.TTL.Milliseconds()}
	switch {
	case a.QuotaApart:
		args = append(args, "", "1")
	case a.Longer:
		args = append(args, "1")
	}
	return keys, args
}

// extendRefusal reads an extend's refusal, of a lease (extend.lua) or a
// permit (sem_extend.lua): {0} nothing held, {-1} held by another digest,
// {-4, either} the same after a forced release took the caller's
// (lockstore.Forced). ok is false for any other reply.
func extendRefusal(reply []any) (err error, ok bool) {
	switch code, _ := reply[0].(int64); code {
	case 0:
		return lockstore.ErrNotHeld, true
	case -1:
		return lockstore.ErrTokenMismatch, true
	case -4:
		if len(reply) == 2 {
			if was, _ := reply[1].(int64); was == 0 || was == -1 {
				err, _ := extendRefusal(reply[1:])
				return lockstore.Forced(err), true
			}
		}
	}
	return nil, false
}

// Extend resets the TTL of the lease of a.Digest.
func Extend(ctx context.Context, c redis.Scripter, key string, a ExtendArgs) (LockValue, error) {
	keys, args := a.Call(key)
	return ExtendRead(ExtendScript.Run(ctx, c, keys, args...))
}

// ExtendRead reads the answer to extend.lua: cmd's reply, or its error.
func ExtendRead(cmd *redis.Cmd) (LockValue, error) {
	reply, err := cmd.Slice()
	if err != nil {
		return LockValue{}, RedisErr(err)
	}
	return ExtendReply(reply)
}

func ExtendReply(reply []any) (LockValue, error) {
	if len(reply) == 0 {
		return LockValue{}, errors.New("lockstore: extend script replied nothing")
	}
	if err, ok := extendRefusal(reply); ok {
		return LockValue{}, err
	}
	code, _ := reply[0].(int64)
	switch {
	case code == -3:
		return LockValue{}, fmt.Errorf("%w: the lease records no length (granted by an older gateway): name a TTL", lockstore.ErrInvalid)
	case code == 1 && (len(reply) == 2 || len(reply) == 3):
		v, err := ParseLockValue(reply[1])
		if len(reply) == 3 { // the expiry the script left (rule V3)
			v.Expiry, _ = reply[2].(int64)
		}
		return v, err
	}
	return LockValue{}, fmt.Errorf("lockstore: extend script replied %v", reply)
}

// errMoved is release.lua's answer when the lease is no longer as the
// caller read it: a write of the same token changed it since. It never
// leaves the package.
var ErrMoved = errors.New("lockstore: the lease changed since it was read")

// nodeRelease deletes digest's lease on a Redlock node if it is still as
// read (v).
func Release(ctx context.Context, c Clocked, key, digest string, v LockValue, honour bool) error {
	keys, args := ReleaseCall(key, digest, PublishAll, v, honour)
	code, err := ReleaseScript.Run(ctx, c, keys, args...).Int64()
	if err != nil {
		return RedisErr(err)
	}
	return ReleaseCode(code)
}

func ReleaseCode(code int64) error {
	switch code {
	case 1:
		return nil
	case 0:
		return lockstore.ErrNotHeld
	case -1:
		return lockstore.ErrTokenMismatch
	case -2:
		return ErrMoved
	}
	return fmt.Errorf("lockstore: release script replied %d", code)
}

// quotaApart is the scripts' flag for a Redis Cluster, where the users'
// quota sets live in other slots than the locks and the caller keeps them
// (lockstore/redis/cluster_quota.go): the one deployment that publishes
// with SPUBLISH.
func quotaApart(publish string) string {
	if publish == PublishShard {
		return "1"
	}
	return "0"
}

// ReleaseCall is release.lua's KEYS and ARGV: delete digest's lease on key
// if it is still v; honour: before the lease's hold-at-least end, leave a
// lingering value until then instead (rule L).
func ReleaseCall(key, digest, publish string, v LockValue, honour bool) (keys []string, args []any) {
	h := "0"
	if honour {
		h = "1"
	}
	f := "0"
	if v.Forced {
		f = "1"
	}
	args = []any{digest, Channel(key), FenceMargin.Milliseconds(), publish, v.Raw, v.Expiry, h, v.Linger.Milliseconds(), f, quotaApart(publish)}
	return []string{LockKey(key), QueueKey(key), FenceKey(key), ForcedKey(key)}, args
}

func Inspect(ctx context.Context, c redis.Scripter, key string) (LockValue, time.Duration, error) {
	reply, err := InspectScript.Run(ctx, c, []string{LockKey(key)}).Slice()
	if err != nil {
		return LockValue{}, 0, RedisErr(err)
	}
	if len(reply) == 0 {
		return LockValue{}, 0, lockstore.ErrNotHeld
	}
	if len(reply) != 3 {
		return LockValue{}, 0, fmt.Errorf("lockstore: inspect script replied %v", reply)
	}
	v, err := ParseLockValue(reply[0])
	pttl, _ := reply[1].(int64)
	v.Expiry, _ = reply[2].(int64)
	if now := v.Expiry - pttl; v.atLeast > now && pttl >= 0 { // the node's clock at the read
		v.AtLeastLeft = time.Duration(v.atLeast-now) * time.Millisecond
	}
	return v, pttlDuration(pttl), err
}

// These name a lock's Redis keys. The hash tag {key} puts a lock, its fence
// counter and its wait queue in one Redis Cluster slot, so one script can
// touch them all. Lock keys cannot contain braces, so the tag is the key.
func LockKey(key string) string { return "lockgw:{" + key + "}:lock" }

func FenceKey(key string) string { return "lockgw:{" + key + "}:fence" }

func QueueKey(key string) string { return "lockgw:{" + key + "}:queue" }

// ForcedKey is the key's forced releases (release.lua, KEYS[4]): the
// digests of leases released by force, each until its lease would have
// ended, for their holders' renewals to learn why (extend.lua). Its name
// does not end in ":lock", so no listing reads it, and no acquire does.
func ForcedKey(key string) string { return "lockgw:{" + key + "}:forced" }

func AliveKey(key string) string { return "lockgw:{" + key + "}:alive" }

// channel is where a release tells the first waiter, by its id, that the
// lock is free. It shares the lock's hash tag, so on a Cluster the scripts
// may SPUBLISH to it: the notification stays on the lock's shard.
func Channel(key string) string { return "lockgw:{" + key + "}:released" }

// The scripts' publish commands (their last argument): classic pub/sub
// for a single Redis, Sentinel and Redlock's nodes (any Redis version),
// sharded pub/sub on a Cluster (Redis 7 or later).
const (
	PublishAll   = "PUBLISH"
	PublishShard = "SPUBLISH"
)

func DigestHex(token string) string {
	d := lockstore.TokenDigest(token)
	return hex.EncodeToString(d[:])
}

// lockValue is a lock's stored value, parsed: "<digest>:<fence>[+<ms>]:<owner>"
// (Redis), "<digest>:^<user>:<fence>:<owner>" (Redis, counted against a
// user's quota) or "<digest>:<attempt>:<fence>:<owner>" (Redlock, the
// attempt field starting with "~"; see acquire.lua).
type LockValue struct {
	Raw     string // the value as stored
	Digest  string
	Attempt string // Redlock's attempt field; "" in Redis's values
	Fence   int64
	Owner   string
	// user is the quota user a Redis value records ("^<user>"), escaped.
	User string
	// length is the lease's length as last granted or extended, from the
	// fence field's "+<ms>"; 0 in a value written by an older gateway.
	Length time.Duration
	// expiry is when the lease expires, Unix ms by the node's clock, as
	// an inspect read it with the value, or as the acquire or extend that
	// wrote the value left it (0 otherwise): with raw, what a release
	// deletes (release.lua; docs/safety.md, rules V2 and V3).
	Expiry int64
	// confirmed: a Redlock round confirmed the value ("<fence>++<ms>",
	// confirm.lua).
	confirmed bool
	// atLeast is the hold-at-least end, Unix ms by the node's clock (0:
	// none): a release before it leaves a lingering value (rule L).
	atLeast int64
	// atLeastLeft is how long atLeast is still ahead of the node's clock
	// as nodeInspect read it (0: none or passed).
	AtLeastLeft time.Duration
	// linger, for a release (release.lua ARGV[8]): before T, or when the
	// value carries none, leave a lingering value at least this long. A
	// Redlock release passes the longest atLeastLeft its reads found, so
	// that a node whose copy of the lease lacks the grant's end (a
	// renewal wrote it there) still keeps the key (review fix, rule L).
	Linger time.Duration
	// Forced, for a release (release.lua ARGV[9]): a forced release, which
	// records the digest it deletes for the holder's renewals.
	Forced bool
}

// provisional says whether v is a Redlock round's value that no round
// confirmed yet: no lease, until one does (docs/safety.md, rule A). A
// value without an attempt field (an older gateway's) is a lease.
func (v LockValue) Provisional() bool {
	return strings.HasPrefix(v.Attempt, "~") && !v.confirmed
}

func ParseLockValue(reply any) (LockValue, error) {
	s, ok := reply.(string)
	if !ok {
		return LockValue{}, fmt.Errorf("lockstore: lock value is %T, not a string", reply)
	}
	digest, rest, ok1 := strings.Cut(s, ":")
	var attempt, user string
	switch {
	case strings.HasPrefix(rest, "~"):
		attempt, rest, _ = strings.Cut(rest, ":")
	case strings.HasPrefix(rest, "^"): // the quota user
		user, rest, _ = strings.Cut(rest[1:], ":")
	}
	fence, owner, ok2 := strings.Cut(rest, ":")
	var atLeast int64
	if strings.HasPrefix(owner, atLeastMark) { // "\x01<T ms>:<owner>" (acquire.lua, ARGV[14])
		t, o, _ := strings.Cut(owner[1:], ":")
		atLeast, _ = strconv.ParseInt(t, 10, 64)
		owner = o
	}
	fence, length, hasLength := strings.Cut(fence, "+")
	length, confirmed := strings.CutPrefix(length, "+")
	f, err := strconv.ParseInt(fence, 10, 64)
	var ms int64
	if err == nil && hasLength {
		ms, err = strconv.ParseInt(length, 10, 64)
	}
	if !ok1 || !ok2 || err != nil || len(digest) != 64 {
		return LockValue{}, fmt.Errorf("lockstore: malformed lock value %q", redactDigest(s))
	}
	return LockValue{Raw: s, Digest: digest, Attempt: attempt, User: user, Fence: f, Owner: owner,
		Length: time.Duration(ms) * time.Millisecond, confirmed: confirmed, atLeast: atLeast}, nil
}

// atLeastMark starts a value's owner field when the grant asked to hold
// the key at least until a time (rule L): no owner label carries it.
const atLeastMark = "\x01"

// lingering is what a release before a lease's hold-at-least end leaves
// in place of digest (release.lua): a digest no token has.
func Lingering(digest string) string { return "L" + digest[1:] }

// Lease is the lease a grant, a renewal or an extend of ttl left, as its
// holder is told it: start was read before the script ran (rule E).
func (v LockValue) Lease(key, token string, ttl time.Duration, start time.Time) lockstore.Lease {
	return lockstore.Lease{Key: key, Token: token, Owner: v.Owner, Fence: v.Fence, Granted: ttl, ExpiresAt: GrantEnd(start, ttl)}
}

// Found is the lease as a read found it, remaining left by the node's
// clock when the read ran after start: what the node said, no allowance
// (rule E: a read promises nothing to a holder, and two reads of one
// lease must agree on its end for a watch).
func (v LockValue) Found(key string, remaining time.Duration, start time.Time) lockstore.Lease {
	return lockstore.Lease{Key: key, Owner: v.Owner, Fence: v.Fence, Granted: v.Length, Left: remaining, ExpiresAt: start.Add(remaining)}
}

// pttlDuration turns a pttlDuration reply into a duration. pttlDuration answers -1 for a key
// without expiry and -2 for a missing key; neither happens to a lock the
// same script just read, so both count as "no time left".
func pttlDuration(ms int64) time.Duration {
	return time.Duration(max(ms, 0)) * time.Millisecond
}

func redactDigest(s string) string {
	if len(s) > 8 {
		return s[:8] + "…"
	}
	return s
}

// redisErr translates a go-redis error into the domain's errors: a Redis
// that cannot answer is ErrUnavailable (the caller's own cancellation stays
// visible through errors.Is), one that refuses writes a *RefusedError; any
// other error reply from a script is a bug, returned for the caller to log.
// redis.Nil cannot occur: every script replies.
func RedisErr(err error) error {
	if err == nil {
		return nil
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		// Redis 7 keeps a command's error code when a script's call fails:
		// "OOM command not allowed … script: …".
		code, _, _ := strings.Cut(rerr.Error(), " ")
		switch code {
		case "OOM", "READONLY", "MISCONF", "NOREPLICAS", "BUSY":
			return &lockstore.RefusedError{Reason: strings.ToLower(code), Msg: rerr.Error()}
		case "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "TIMEOUT",
			LateReply, ClockReply: // rule D (clock.go): the grant wrote nothing
		default:
			return fmt.Errorf("lockstore: redis: %w", err)
		}
	}
	// Timeouts, refused or broken connections, a closed client, a Redis
	// still loading or failing over: Redis did not answer.
	return fmt.Errorf("%w: %w", lockstore.ErrUnavailable, err)
}

// userEscaper makes a user name safe inside a lock's value (fields split by
// ":") and inside a hash tag ("{…}").
var userEscaper = strings.NewReplacer("%", "%25", ":", "%3A", "{", "%7B", "}", "%7D")

// EscapeUser is user as the scripts' keys and values carry it.
func EscapeUser(user string) string { return userEscaper.Replace(user) }
