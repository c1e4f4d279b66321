package lockstore

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
	acquireLua    string
	acquireScript = redis.NewScript(deadlineLua + acquireLua) // rule D: clock.go

	//go:embed lua/extend.lua
	extendLua    string
	extendScript = redis.NewScript(extendLua)

	//go:embed lua/release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)

	//go:embed lua/inspect.lua
	inspectLua    string
	inspectScript = redis.NewScript(inspectLua)

	//go:embed lua/leave.lua
	leaveLua    string
	leaveScript = redis.NewScript(leaveLua)
)

// Redis is a Store on one Redis deployment: a single node, or anything a
// redis.UniversalClient reaches (Sentinel, Cluster). Every operation is one
// Lua script, so no read-then-write can interleave with another client's.
// Redis keeps only a SHA-256 digest of each token.
//
// Per-user quotas (AcquireRequest.Quota) are counted in Redis, in one set
// per user, so they hold across every gateway on the Redis. On a single
// Redis or Sentinel the same script changes the set and the lock: the
// count is exact. On a Cluster the set lives in the user's slot, apart
// from the lock's, and each change takes two scripts (redis_cluster_quota.go):
// the cap still holds across gateways (a place is reserved before the
// lock is taken, and given back only after it is gone), but a gateway
// that dies between the two steps leaves the count one too high until the
// lease it counted would have ended, and a lock's count ends up to a round
// trip (plus the two nodes' clock difference) before its lease does.
type Redis struct {
	client redis.UniversalClient
	// scripts runs the scripts of requests: for one server (single,
	// Sentinel) a nodeBatch of client, which sends the scripts of
	// concurrent requests as one pipeline (redlock_batch.go); client on a
	// Cluster.
	scripts  redis.Scripter
	batch    *nodeBatch  // scripts, when it batches
	clocks   *clocks     // rule D's samples of the servers (clock.go)
	acks     replicaAcks // LOCKGW_REDIS_WAIT_REPLICAS (redis_replicas.go)
	notifier *notifier
	rooms    *rooms // the waiters of this store, by key (wait_room.go)
	// publish is how the scripts tell waiters: PUBLISH, or SPUBLISH on a
	// Cluster (see notifier).
	publish string
	mode    RedisMode // what Topology reports
	// sentinels and masterName, on Sentinel: whom Topology asks which
	// master the client follows.
	sentinels  []*redis.SentinelClient
	masterName string
}

var _ Store = (*Redis)(nil)

// NewRedis returns a Store over client. Close closes the client.
//
// Give the client short dial, read and write timeouts and
// ContextTimeoutEnabled, so that a dead Redis costs a request a bounded
// wait, and MaxRetries -1: a retried release whose first attempt succeeded
// would report "not held".
//
// A Cluster client gets a hook that reloads its slot map when a node
// cannot be reached, so that the store finds a promoted replica at once
// (redis_cluster_quota.go).
func NewRedis(client redis.UniversalClient) *Redis {
	if cc, ok := client.(*redis.ClusterClient); ok {
		cc.AddHook(reloadOnFailure{cc})
	}
	n := newNotifier(client)
	publish, mode := publishAll, RedisSingle
	if n.sharded {
		publish, mode = publishShard, RedisCluster
	}
	s := &Redis{client: client, scripts: client, clocks: newClocks(clientTimeout(client), n.sharded), notifier: n, rooms: newRooms(), publish: publish, mode: mode}
	if c, ok := client.(*redis.Client); ok {
		s.batch = newNodeBatch(c, clientTimeout(client))
		s.scripts = s.batch
	}
	return s
}

// grants is the client for the scripts that grant: they carry rule D's
// deadline (clock.go).
func (s *Redis) grants(c redis.Scripter) clocked {
	return clocked{Scripter: c, clocks: s.clocks}
}

// clientTimeout is how long a call through client may take before the
// client gives up on it by itself (its read timeout), go-redis's default
// when the client does not say.
func clientTimeout(client redis.UniversalClient) time.Duration {
	var t time.Duration
	switch c := client.(type) {
	case *redis.Client:
		t = c.Options().ReadTimeout
	case *redis.ClusterClient:
		t = c.Options().ReadTimeout
	}
	if t <= 0 {
		t = 3 * time.Second
	}
	return t
}

// Acquire implements Store.
func (s *Redis) Acquire(ctx context.Context, key string, req AcquireRequest) (Lease, error) {
	if req.Wait > 0 {
		return s.acquireWaiting(ctx, key, &req) // wait.go
	}
	return s.acquireNow(ctx, key, &req)
}

// acquireNow is an acquire that does not wait. (Apart from Acquire, whose
// frame is then small, for the waiting acquires parked under it.)
func (s *Redis) acquireNow(ctx context.Context, key string, req *AcquireRequest) (Lease, error) {
	a, start, err := s.prepare(ctx, key, req)
	if err != nil {
		return Lease{}, err
	}
	r, err := s.acquire(ctx, key, &a)
	if err != nil {
		return Lease{}, err
	}
	switch r.code {
	case acquireHeld:
		return Lease{}, &HeldError{Remaining: r.remaining}
	case acquireOverQuota:
		return Lease{}, r.capErr
	}
	return r.lease(key, req.Token, req.TTL, start), nil
}

// prepare checks an acquire and makes its script's arguments; start
// is when the acquire began.
func (s *Redis) prepare(ctx context.Context, key string, req *AcquireRequest) (a acquireArgs, start time.Time, err error) {
	if err := CheckAcquire(key, *req); err != nil {
		return a, start, err
	}
	if err := CheckQuota(req.Quota); err != nil {
		return a, start, err
	}
	a = acquireArgs{digest: digestHex(req.Token), ttl: req.TTL, owner: req.Owner, quota: newCounting(ctx, req.Quota), publish: s.publish, holdAtLeast: req.HoldAtLeast}
	return a, time.Now(), nil
}

// acquire runs acquire.lua, again with the right quota set when the lock
// the caller renews counts against another user than a.quota believed (it
// keeps the user it learnt for later calls).
func (s *Redis) acquire(ctx context.Context, key string, a *acquireArgs) (acquireResult, error) {
	if s.onCluster() {
		return s.clusterAcquire(ctx, key, a)
	}
	for range recountTries {
		r, err := s.acquireAcked(ctx, key, *a)
		if err != nil || r.code != acquireElsewhere {
			return r, err
		}
		a.quota.holder = r.user
	}
	return acquireResult{}, errRecount
}

// Extend implements Store.
func (s *Redis) Extend(ctx context.Context, key, token string, ttl time.Duration) (Lease, error) {
	if err := CheckExtend(key, token, ttl); err != nil {
		return Lease{}, err
	}
	start := time.Now()
	if s.onCluster() {
		return s.clusterExtend(ctx, key, token, ttl, start)
	}
	holder := escapeUser(userHint(ctx))
	for range recountTries {
		args := []any{digestHex(token), ttl.Milliseconds()}
		reply, err := s.extendAcked(ctx, quotaKeys([]string{lockKey(key)}, holder), args)
		if err != nil {
			return Lease{}, err
		}
		if user, ok := elsewhere(reply, -2); ok {
			holder = user
			continue
		}
		v, err := extendReply(reply)
		if err != nil {
			return Lease{}, err
		}
		if ttl == 0 {
			ttl = v.length
		}
		return v.lease(key, token, ttl, start), nil
	}
	return Lease{}, errRecount
}

// Release implements Store, in two steps (docs/safety.md, "Late writes on
// redis", rule V2): it reads the lease, then deletes it only as read, its
// value and expiry unchanged. A release that lands late, after later
// requests of the token were answered, so finds the lease changed and
// deletes nothing.
func (s *Redis) Release(ctx context.Context, key, token string) error {
	if err := CheckRelease(key, token); err != nil {
		return err
	}
	_, err := s.release(ctx, key, digestHex(token), 0)
	return err
}

// ForceRelease implements Forcer: Release, with the holder's digest taken
// from the read in place of the caller's token's.
func (s *Redis) ForceRelease(ctx context.Context, key string, fence int64) (Lease, error) {
	if err := CheckForce(key, fence, false); err != nil {
		return Lease{}, err
	}
	v, err := s.release(ctx, key, "", fence)
	if err != nil {
		return Lease{}, forcedErr(err)
	}
	return Lease{Key: key, Owner: v.owner, Fence: v.fence, Granted: v.length}, nil
}

// release deletes the lease of digest on key as read (Release). A forced
// release passes digest "": the holder by the first read, whose fence must
// be fence when that is not 0; its later reads, when the lease changed
// under it, hold that holder to the digest it read, as a Release does the
// caller's. It returns the value it deleted.
func (s *Redis) release(ctx context.Context, key, digest string, fence int64) (lockValue, error) {
	v, _, err := nodeInspect(ctx, s.scripts, key)
	if err != nil {
		return lockValue{}, err
	}
	forced := digest == ""
	if forced {
		if fence != 0 && v.fence != fence {
			return lockValue{}, ErrNotHeld
		}
		digest = v.digest
	}
	for range releaseReads {
		switch v.digest {
		case digest:
		case lingering(digest): // released before its hold-at-least end (rule L)
			return lockValue{}, ErrNotHeld
		default:
			return lockValue{}, ErrTokenMismatch
		}
		// The value names the user the lock counts against, and the
		// delete happens only if the value is still v: on a single Redis
		// the script takes it out of that user's set; on a Cluster, where
		// the set lives in another slot, the caller does.
		// A forced release frees the key at once, whatever the holder's
		// hold-at-least (rule L): it is how an administrator frees it.
		keys, args := releaseCall(key, digest, s.publish, v, !forced)
		if !s.onCluster() {
			keys = quotaKeys(keys, v.user)
		}
		reply, err := releaseScript.Run(ctx, s.scripts, keys, args...).Result()
		if err != nil {
			return lockValue{}, redisErr(err)
		}
		if list, ok := reply.([]any); ok && len(list) == 2 && list[0] == int64(1) {
			if user, ok := list[1].(string); ok && user != "" {
				s.uncount(quotaKey(user), quotaMember(key, digest))
			}
			return v, nil
		}
		code, _ := reply.(int64)
		if err := releaseCode(code); !errors.Is(err, errMoved) {
			return v, err
		}
		pinned := v.fence
		if v, _, err = nodeInspect(ctx, s.scripts, key); err != nil {
			return lockValue{}, err
		}
		if forced && v.digest == digest && v.fence != pinned {
			// The lease read ended; the holder's token took the key
			// again since (a new grant, a new fence): not the lease this
			// forced release read or named (review fix).
			return lockValue{}, ErrNotHeld
		}
	}
	return lockValue{}, fmt.Errorf("%w: the lease kept changing while it was released (a renewal or an extend of the same token at the same time); release again", ErrUnavailable)
}

// releaseReads bounds how often a release reads a lease that requests of
// the same token keep changing under it.
const releaseReads = 3

// recountTries bounds the calls an operation makes to find the quota set
// of the user its lock counts against: the hint, then the user the lock
// names. A third is needed only if the lock changed hands in between.
const recountTries = 3

var errRecount = errors.New("lockstore: the lock's quota user kept changing")

// counting is what acquire.lua needs to count a grant against a user:
// the cap (0: count nothing new), the caller's user and the user the caller
// believes its lock counts against if it renews it, both escaped.
type counting struct {
	max          int
	user, holder string
}

func newCounting(ctx context.Context, q Quota) counting {
	if q.Max > 0 {
		u := escapeUser(q.User)
		return counting{max: q.Max, user: u, holder: u}
	}
	return counting{holder: escapeUser(userHint(ctx))}
}

// on: the call passes quota sets. Without a cap or a hint it passes none,
// so that a deployment without quotas never names a key outside the
// lock's Redis Cluster slot.
func (c counting) on() bool { return c.max > 0 || c.holder != "" }

// quotaKey is the set of a user's live locks (escaped user; see
// acquire.lua, "Counting"). Its hash tag is the user's, apart from every
// lock's: one script cannot touch both on a Redis Cluster.
func quotaKey(escapedUser string) string { return "lockgw:{quota:" + escapedUser + "}:locks" }

// quotaKeys appends holder's quota set to a release's or an extend's keys;
// with no holder known, the script names it if the lock counts against one.
func quotaKeys(keys []string, holder string) []string {
	if holder == "" {
		return keys
	}
	return append(keys, quotaKey(holder))
}

// elsewhere reads a script's "counts against user, call again" reply.
func elsewhere(reply []any, code int64) (string, bool) {
	if len(reply) != 2 || reply[0] != code {
		return "", false
	}
	user, ok := reply[1].(string)
	return user, ok && user != ""
}

// Inspect implements Store.
func (s *Redis) Inspect(ctx context.Context, key string) (Lease, error) {
	start := time.Now()
	v, remaining, err := nodeInspect(ctx, s.scripts, key)
	if err != nil {
		return Lease{}, err
	}
	l := v.lease(key, "", remaining, start)
	l.Granted, l.Left = v.length, remaining
	return l, nil
}

// Ping implements Store with a write, so a Redis that answers but refuses
// writes (ErrRefused) is not ready either: it could not grant a lock. (In
// a Cluster the write reaches the one shard that owns readyKey.)
func (s *Redis) Ping(ctx context.Context) error {
	if s.acks.replicas == 0 {
		return redisErr(s.client.Set(ctx, readyKey, "1", time.Minute).Err())
	}
	// With LOCKGW_REDIS_WAIT_REPLICAS every grant waits for replicas: a
	// Redis without enough of them answers every acquire 503, so it is not
	// ready either (ErrReplicas).
	conn, err := s.conn()
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.Set(ctx, readyKey, "1", time.Minute).Err(); err != nil {
		return redisErr(err)
	}
	return s.acks.await(ctx, conn)
}

// readyKey is what Ping writes; lock keys always carry a hash tag.
const readyKey = "lockgw:ready"

// Close implements Store.
func (s *Redis) Close() error {
	s.notifier.close()
	for _, c := range s.sentinels {
		_ = c.Close()
	}
	return s.client.Close()
}

// The node* functions run one script on one Redis node and translate its
// reply into the domain's terms. Redis uses them on its only node; Redlock
// uses them on each of its nodes.

type acquireCode int64

const (
	acquireHeld      acquireCode = 0
	acquireNew       acquireCode = 1
	acquireRenewed   acquireCode = 2
	acquireElsewhere acquireCode = 3 // the renewed lock counts against another user's set
	acquireOverQuota acquireCode = 4
)

type acquireResult struct {
	code      acquireCode
	value     lockValue     // when granted or renewed
	remaining time.Duration // when held by another
	head      bool          // when held: the caller is first in the wait queue
	user      string        // when elsewhere: whom the lock counts against
	capErr    *CapError     // when over quota
}

// waitTicket places a waiting caller in a key's queue; the zero value is a
// caller that does not wait.
type waitTicket struct {
	id        string
	heartbeat time.Duration
}

func (r acquireResult) lease(key, token string, ttl time.Duration, start time.Time) Lease {
	l := r.value.lease(key, token, ttl, start)
	l.Renewed = r.code == acquireRenewed
	return l
}

// acquireArgs is what one acquire script call needs besides the key.
type acquireArgs struct {
	digest string
	ttl    time.Duration
	owner  string
	ticket waitTicket
	// seed, when positive, replaces Redis TIME as the fence seed (µs).
	seed int64
	// attempt is a Redlock round's id ("" for Redis): a value the round
	// makes records it as its maker, and lives provisional until a round
	// confirms it (confirm.lua).
	attempt     string
	provisional time.Duration
	// quota counts the grant against a user (Redis only).
	quota counting
	// publish is SPUBLISH on a Cluster; "" (PUBLISH) elsewhere.
	publish string
	// holdAtLeast: a new grant keeps the key this long at least (rule L).
	holdAtLeast time.Duration
}

// call is acquire.lua's KEYS and ARGV for key: one layout for every
// setup (the script's header names each).
func (a acquireArgs) call(key string) (keys []string, args []any) {
	keys = []string{lockKey(key), fenceKey(key), queueKey(key), aliveKey(key)}
	cap, user := 0, ""
	switch {
	case a.publish == publishShard:
		// On a Cluster the caller counts (redis_cluster_quota.go); the script
		// only records the user (or refuses a new grant: max -1).
		cap, user = a.quota.max, a.quota.user
	case a.quota.on():
		counted := a.quota.user
		if a.quota.max == 0 { // counts nothing new: the set only fills the place
			counted = a.quota.holder
		}
		keys = append(keys, quotaKey(counted), quotaKey(a.quota.holder))
		cap, user = a.quota.max, a.quota.user
	}
	args = []any{a.digest, a.ttl.Milliseconds(), a.owner, FenceMargin.Milliseconds(),
		a.ticket.id, a.ticket.heartbeat.Milliseconds(), channel(key), a.seed,
		a.attempt, a.provisional.Milliseconds(), cap, user, cmp.Or(a.publish, publishAll), a.holdAtLeast.Milliseconds()}
	return keys, args
}

func nodeAcquire(ctx context.Context, c clocked, key string, a acquireArgs) (acquireResult, error) {
	keys, args := a.call(key)
	reply, err := acquireScript.Run(ctx, c, keys, args...).Slice()
	if err != nil {
		return acquireResult{}, redisErr(err)
	}
	return acquireReply(reply, a)
}

func acquireReply(reply []any, a acquireArgs) (acquireResult, error) {
	if len(reply) < 2 {
		return acquireResult{}, fmt.Errorf("lockstore: acquire script replied %v", reply)
	}
	code, _ := reply[0].(int64)
	switch acquireCode(code) {
	case acquireHeld:
		pttl, _ := reply[1].(int64)
		head := len(reply) == 3 && reply[2] == int64(1)
		return acquireResult{code: acquireHeld, remaining: pttlDuration(pttl), head: head}, nil
	case acquireNew, acquireRenewed:
		v, err := parseLockValue(reply[1])
		return acquireResult{code: acquireCode(code), value: v}, err
	case acquireElsewhere:
		if user, ok := elsewhere(reply, int64(acquireElsewhere)); ok {
			return acquireResult{code: acquireElsewhere, user: user}, nil
		}
	case acquireOverQuota:
		ms, _ := reply[1].(int64)
		return acquireResult{code: acquireOverQuota, capErr: &CapError{Err: ErrUserQuota, Max: a.quota.max, Next: pttlDuration(ms)}}, nil
	}
	return acquireResult{}, fmt.Errorf("lockstore: acquire script replied %v", reply)
}

// nodeExtend resets the TTL of digest's lease; with longer (Redlock) it
// only ever lengthens it.
func nodeExtend(ctx context.Context, c redis.Scripter, key, digest string, ttl time.Duration, longer bool) (lockValue, error) {
	keys, args := []string{lockKey(key)}, []any{digest, ttl.Milliseconds()}
	if longer {
		args = append(args, "1")
	}
	reply, err := extendScript.Run(ctx, c, keys, args...).Slice()
	if err != nil {
		return lockValue{}, redisErr(err)
	}
	return extendReply(reply)
}

func extendReply(reply []any) (lockValue, error) {
	if len(reply) == 0 {
		return lockValue{}, errors.New("lockstore: extend script replied nothing")
	}
	code, _ := reply[0].(int64)
	switch {
	case code == 0:
		return lockValue{}, ErrNotHeld
	case code == -1:
		return lockValue{}, ErrTokenMismatch
	case code == -3:
		return lockValue{}, fmt.Errorf("%w: the lease records no length (granted by an older gateway): name a TTL", ErrInvalid)
	case code == 1 && len(reply) == 2:
		return parseLockValue(reply[1])
	}
	return lockValue{}, fmt.Errorf("lockstore: extend script replied %v", reply)
}

// errMoved is release.lua's answer when the lease is no longer as the
// caller read it: a write of the same token changed it since. It never
// leaves the package.
var errMoved = errors.New("lockstore: the lease changed since it was read")

// nodeRelease deletes digest's lease on a Redlock node if it is still as
// read (v).
func nodeRelease(ctx context.Context, c redis.Scripter, key, digest string, v lockValue, honour bool) error {
	keys, args := releaseCall(key, digest, publishAll, v, honour)
	code, err := releaseScript.Run(ctx, c, keys, args...).Int64()
	if err != nil {
		return redisErr(err)
	}
	return releaseCode(code)
}

func releaseCode(code int64) error {
	switch code {
	case 1:
		return nil
	case 0:
		return ErrNotHeld
	case -1:
		return ErrTokenMismatch
	case -2:
		return errMoved
	}
	return fmt.Errorf("lockstore: release script replied %d", code)
}

// releaseCall is release.lua's KEYS and ARGV for key, to delete the lease
// as read (v, from nodeInspect).
// releaseCall is release.lua's KEYS and ARGV: delete digest's lease on key
// if it is still v; honour: before the lease's hold-at-least end, leave a
// lingering value until then instead (rule L).
func releaseCall(key, digest, publish string, v lockValue, honour bool) (keys []string, args []any) {
	h := "0"
	if honour {
		h = "1"
	}
	args = []any{digest, channel(key), FenceMargin.Milliseconds(), publish, v.raw, v.expiry, h, v.linger.Milliseconds()}
	return []string{lockKey(key), queueKey(key), fenceKey(key)}, args
}

func nodeInspect(ctx context.Context, c redis.Scripter, key string) (lockValue, time.Duration, error) {
	reply, err := inspectScript.Run(ctx, c, []string{lockKey(key)}).Slice()
	if err != nil {
		return lockValue{}, 0, redisErr(err)
	}
	if len(reply) == 0 {
		return lockValue{}, 0, ErrNotHeld
	}
	if len(reply) != 3 {
		return lockValue{}, 0, fmt.Errorf("lockstore: inspect script replied %v", reply)
	}
	v, err := parseLockValue(reply[0])
	pttl, _ := reply[1].(int64)
	v.expiry, _ = reply[2].(int64)
	if now := v.expiry - pttl; v.atLeast > now && pttl >= 0 { // the node's clock at the read
		v.atLeastLeft = time.Duration(v.atLeast-now) * time.Millisecond
	}
	return v, pttlDuration(pttl), err
}

// These name a lock's Redis keys. The hash tag {key} puts a lock, its fence
// counter and its wait queue in one Redis Cluster slot, so one script can
// touch them all. Lock keys cannot contain braces, so the tag is the key.
func lockKey(key string) string  { return "lockgw:{" + key + "}:lock" }
func fenceKey(key string) string { return "lockgw:{" + key + "}:fence" }
func queueKey(key string) string { return "lockgw:{" + key + "}:queue" }
func aliveKey(key string) string { return "lockgw:{" + key + "}:alive" }

// channel is where a release tells the first waiter, by its id, that the
// lock is free. It shares the lock's hash tag, so on a Cluster the scripts
// may SPUBLISH to it: the notification stays on the lock's shard.
func channel(key string) string { return "lockgw:{" + key + "}:released" }

// The scripts' publish commands (their last argument): classic pub/sub
// for a single Redis, Sentinel and Redlock's nodes (any Redis version),
// sharded pub/sub on a Cluster (Redis 7 or later).
const (
	publishAll   = "PUBLISH"
	publishShard = "SPUBLISH"
)

func digestHex(token string) string {
	d := TokenDigest(token)
	return hex.EncodeToString(d[:])
}

// lockValue is a lock's stored value, parsed: "<digest>:<fence>[+<ms>]:<owner>"
// (Redis), "<digest>:^<user>:<fence>:<owner>" (Redis, counted against a
// user's quota) or "<digest>:<attempt>:<fence>:<owner>" (Redlock, the
// attempt field starting with "~"; see acquire.lua).
type lockValue struct {
	raw     string // the value as stored
	digest  string
	attempt string // Redlock's attempt field; "" in Redis's values
	fence   int64
	owner   string
	// user is the quota user a Redis value records ("^<user>"), escaped.
	user string
	// length is the lease's length as last granted or extended, from the
	// fence field's "+<ms>"; 0 in a value written by an older gateway.
	length time.Duration
	// expiry is when the lease expires, Unix ms by the node's clock, as
	// nodeInspect read it with the value (0 otherwise): with raw, what a
	// release deletes (release.lua).
	expiry int64
	// confirmed: a Redlock round confirmed the value ("<fence>++<ms>",
	// confirm.lua).
	confirmed bool
	// atLeast is the hold-at-least end, Unix ms by the node's clock (0:
	// none): a release before it leaves a lingering value (rule L).
	atLeast int64
	// atLeastLeft is how long atLeast is still ahead of the node's clock
	// as nodeInspect read it (0: none or passed).
	atLeastLeft time.Duration
	// linger, for a release (release.lua ARGV[8]): before T, or when the
	// value carries none, leave a lingering value at least this long. A
	// Redlock release passes the longest atLeastLeft its reads found, so
	// that a node whose copy of the lease lacks the grant's end (a
	// renewal wrote it there) still keeps the key (review fix, rule L).
	linger time.Duration
}

// provisional says whether v is a Redlock round's value that no round
// confirmed yet: no lease, until one does (docs/safety.md, rule A). A
// value without an attempt field (an older gateway's) is a lease.
func (v lockValue) provisional() bool {
	return strings.HasPrefix(v.attempt, "~") && !v.confirmed
}

func parseLockValue(reply any) (lockValue, error) {
	s, ok := reply.(string)
	if !ok {
		return lockValue{}, fmt.Errorf("lockstore: lock value is %T, not a string", reply)
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
		return lockValue{}, fmt.Errorf("lockstore: malformed lock value %q", redactDigest(s))
	}
	return lockValue{raw: s, digest: digest, attempt: attempt, user: user, fence: f, owner: owner,
		length: time.Duration(ms) * time.Millisecond, confirmed: confirmed, atLeast: atLeast}, nil
}

// atLeastMark starts a value's owner field when the grant asked to hold
// the key at least until a time (rule L): no owner label carries it.
const atLeastMark = "\x01"

// lingering is what a release before a lease's hold-at-least end leaves
// in place of digest (release.lua): a digest no token has.
func lingering(digest string) string { return "L" + digest[1:] }

func (v lockValue) lease(key, token string, ttl time.Duration, start time.Time) Lease {
	return Lease{
		Key:     key,
		Token:   token,
		Owner:   v.owner,
		Fence:   v.fence,
		Granted: ttl,
		// start was read before the script ran, so start+ttl is never later
		// than the expiry Redis applies.
		ExpiresAt: start.Add(ttl),
	}
}

// pttlDuration turns a PTTL reply into a duration. PTTL answers -1 for a key
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
func redisErr(err error) error {
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
			return &RefusedError{Reason: strings.ToLower(code), msg: rerr.Error()}
		case "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "TIMEOUT",
			lateReply, clockReply: // rule D (clock.go): the grant wrote nothing
		default:
			return fmt.Errorf("lockstore: redis: %w", err)
		}
	}
	// Timeouts, refused or broken connections, a closed client, a Redis
	// still loading or failing over: Redis did not answer.
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}
