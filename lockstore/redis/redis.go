package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/redis/go-redis/v9"
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
// from the lock's, and each change takes two scripts (cluster_quota.go):
// the cap still holds across gateways (a place is reserved before the
// lock is taken, and given back only after it is gone), but a gateway
// that dies between the two steps leaves the count one too high until the
// lease it counted would have ended, and a lock's count ends up to a round
// trip (plus the two nodes' clock difference) before its lease does.
type Store struct {
	client redis.UniversalClient
	// scripts runs the scripts of requests: for one server (single,
	// Sentinel) a nodeBatch of client, which sends the scripts of
	// concurrent requests as one pipeline (script/batch.go); client on a
	// Cluster.
	scripts  redis.Scripter
	batch    *script.Batch  // scripts, when it batches
	clocks   *script.Clocks // rule D's samples of the servers (script/clock.go)
	acks     replicaAcks    // LOCKGW_REDIS_WAIT_REPLICAS (replicas.go)
	notifier *script.Notifier
	rooms    *rooms     // the waiters of this store, by key (wait_room.go)
	known    knownPairs // the leases' pairs as this gateway was answered (known.go)
	// publish is how the scripts tell waiters: PUBLISH, or SPUBLISH on a
	// Cluster (see notifier).
	publish string
	mode    Mode // what Topology reports
	// sentinels and masterName, on Sentinel: whom Topology asks which
	// master the client follows.
	sentinels  []*redis.SentinelClient
	masterName string
}

var _ lockstore.Store = (*Store)(nil)

// NewRedis returns a Store over client. Close closes the client.
//
// Give the client short dial, read and write timeouts and
// ContextTimeoutEnabled, so that a dead Redis costs a request a bounded
// wait, and MaxRetries -1: a retried release whose first attempt succeeded
// would report "not held".
//
// A Cluster client gets a hook that reloads its slot map when a node
// cannot be reached, so that the store finds a promoted replica at once
// (cluster_quota.go), and one on each node's client that tells rule D of
// the copies of a call it sent (script.CopyHook). Each server's client
// gets one that calls the scripts carrying rule D's deadline as functions
// (script.Functions). Give New a Cluster client that has not run a command
// yet, so that no node misses them.
func New(client redis.UniversalClient) *Store {
	if cc, ok := client.(*redis.ClusterClient); ok {
		cc.AddHook(reloadOnFailure{cc})
		// Rule D: a copy the client sent again, after a reset, of a grant or
		// a delete may still land; the call answers only after its deadline.
		cc.OnNewNode(func(node *redis.Client) {
			node.AddHook(script.CopyHook{})
			node.AddHook(script.NewFunctions(node))
		})
	}
	if c, ok := client.(*redis.Client); ok {
		// Rule D's run id, read once per process: the scripts that carry
		// it go as the library's functions (script/functions.go).
		c.AddHook(script.NewFunctions(c))
	}
	n := script.NewNotifier(client)
	publish, mode := script.PublishAll, Single
	if n.Sharded {
		publish, mode = script.PublishShard, Cluster
	}
	s := &Store{client: client, scripts: client, clocks: script.NewClocks(clientTimeout(client), n.Sharded), notifier: n, rooms: newRooms(), publish: publish, mode: mode}
	if c, ok := client.(*redis.Client); ok {
		s.batch = script.NewBatch(c, clientTimeout(client))
		s.scripts = s.batch
	}
	return s
}

// clocked is the client for the scripts that grant or delete: they carry
// rule D's deadline (script/clock.go).
func (s *Store) clocked(c redis.Scripter) script.Clocked {
	return script.Clocked{Scripter: c, Clocks: s.clocks}
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
func (s *Store) Acquire(ctx context.Context, key string, req lockstore.AcquireRequest) (lockstore.Lease, error) {
	if req.Wait > 0 {
		return s.acquireInLine(ctx, key, &req) // wait.go
	}
	return s.acquireNow(ctx, key, &req)
}

// acquireNow is an acquire that does not wait. (Apart from Acquire, whose
// frame is then small, for the waiting acquires parked under it.)
func (s *Store) acquireNow(ctx context.Context, key string, req *lockstore.AcquireRequest) (lockstore.Lease, error) {
	a, start, err := s.prepare(ctx, key, req)
	if err != nil {
		return lockstore.Lease{}, err
	}
	r, err := s.acquire(ctx, key, &a)
	if err != nil {
		return lockstore.Lease{}, err
	}
	switch r.Code {
	case script.AcquireHeld:
		return lockstore.Lease{}, &lockstore.HeldError{Remaining: r.Remaining}
	case script.AcquireOverQuota:
		return lockstore.Lease{}, r.CapErr
	}
	return r.Lease(key, req.Token, req.TTL, start), nil
}

// prepare checks an acquire and makes its script's arguments; start
// is when the acquire began.
func (s *Store) prepare(ctx context.Context, key string, req *lockstore.AcquireRequest) (a script.AcquireArgs, start time.Time, err error) {
	if err := lockstore.CheckAcquire(key, *req); err != nil {
		return a, start, err
	}
	if err := lockstore.CheckQuota(req.Quota); err != nil {
		return a, start, err
	}
	a = script.AcquireArgs{Digest: script.DigestHex(req.Token), Ttl: req.TTL, Owner: req.Owner, Quota: script.NewCounting(ctx, req.Quota), Publish: s.publish, HoldAtLeast: req.HoldAtLeast}
	return a, s.now(), nil
}

// acquire runs acquire.lua, again with the right quota set when the lock
// the caller renews counts against another user than a.quota believed (it
// keeps the user it learnt for later calls). It remembers the lease a grant
// or a renewal left, for its release (rule V3).
func (s *Store) acquire(ctx context.Context, key string, a *script.AcquireArgs) (script.AcquireResult, error) {
	r, err := s.acquireCounted(ctx, key, a)
	if err == nil && (r.Code == script.AcquireNew || r.Code == script.AcquireRenewed) {
		s.known.remember(key, r.Value)
	}
	return r, err
}

func (s *Store) acquireCounted(ctx context.Context, key string, a *script.AcquireArgs) (script.AcquireResult, error) {
	if s.onCluster() {
		return s.clusterAcquire(ctx, key, a)
	}
	for range recountTries {
		r, err := s.acquireAcked(ctx, key, *a)
		if err != nil || r.Code != script.AcquireElsewhere {
			return r, err
		}
		a.Quota.Holder = r.User
	}
	return script.AcquireResult{}, errRecount
}

// Extend implements Store.
func (s *Store) Extend(ctx context.Context, key, token string, ttl time.Duration) (lockstore.Lease, error) {
	if err := lockstore.CheckExtend(key, token, ttl); err != nil {
		return lockstore.Lease{}, err
	}
	start := s.now()
	if s.onCluster() {
		return s.clusterExtend(ctx, key, token, ttl, start)
	}
	holder := script.EscapeUser(lockstore.UserHint(ctx))
	for range recountTries {
		reply, err := s.extendAcked(ctx, key, script.ExtendArgs{Digest: script.DigestHex(token), TTL: ttl, Holder: holder})
		if err != nil {
			return lockstore.Lease{}, err
		}
		if user, ok := script.Elsewhere(reply, -2); ok {
			holder = user
			continue
		}
		v, err := script.ExtendReply(reply)
		if err != nil {
			return lockstore.Lease{}, err
		}
		s.known.remember(key, v)
		if ttl == 0 {
			ttl = v.Length
		}
		return v.Lease(key, token, ttl, start), nil
	}
	return lockstore.Lease{}, errRecount
}

// Release implements Store (docs/safety.md, "Late writes on redis"): it
// deletes the lease only as this gateway last knew it, its value and
// expiry unchanged. That pair is the one the grant, renewal or extend
// through this gateway was answered (rule V3), else one it reads first
// (rule V2). The delete carries rule D's deadline: one that lands after
// the release was answered, or on another server, writes nothing.
func (s *Store) Release(ctx context.Context, key, token string) error {
	if err := lockstore.CheckRelease(key, token); err != nil {
		return err
	}
	_, err := s.release(ctx, key, script.DigestHex(token), 0)
	return err
}

// ForceRelease implements Forcer: Release, with the holder's digest taken
// from the read in place of the caller's token's.
func (s *Store) ForceRelease(ctx context.Context, key string, fence int64) (lockstore.Lease, error) {
	if err := lockstore.CheckForce(key, fence, false); err != nil {
		return lockstore.Lease{}, err
	}
	v, err := s.release(ctx, key, "", fence)
	if err != nil {
		return lockstore.Lease{}, lockstore.ForcedErr(err)
	}
	return lockstore.Lease{Key: key, Owner: v.Owner, Fence: v.Fence, Granted: v.Length}, nil
}

// release deletes the lease of digest on key as read (Release). A forced
// release passes digest "": the holder by the first read, whose fence must
// be fence when that is not 0; its later reads, when the lease changed
// under it, hold that holder to the digest it read, as a Release does the
// caller's. It returns the value it deleted.
func (s *Store) release(ctx context.Context, key, digest string, fence int64) (script.LockValue, error) {
	tries := script.ReleaseReads
	v, known := s.known.take(key, digest)
	if known {
		tries++ // the remembered pair's try comes first (rule V3)
	} else {
		var err error
		if v, _, err = script.Inspect(ctx, s.scripts, key); err != nil {
			return script.LockValue{}, err
		}
	}
	forced := digest == ""
	if forced {
		if fence != 0 && v.Fence != fence {
			return script.LockValue{}, lockstore.ErrNotHeld
		}
		digest = v.Digest
	}
	handed := false // the first script only goes with a waiter's try (handoff.go)
	for range tries {
		switch v.Digest {
		case digest:
		case script.Lingering(digest): // released before its hold-at-least end (rule L)
			return script.LockValue{}, lockstore.ErrNotHeld
		default:
			return script.LockValue{}, lockstore.ErrTokenMismatch
		}
		// The value names the user the lock counts against, and the
		// delete happens only if the value is still v: on a single Redis
		// the script takes it out of that user's set; on a Cluster, where
		// the set lives in another slot, the caller does.
		// A forced release frees the key at once, whatever the holder's
		// hold-at-least (rule L): it is how an administrator frees it.
		v.Forced = forced // leaves the digest for the holder's renewals (extend.lua)
		keys, args := script.ReleaseCall(key, digest, s.publish, v, !forced)
		if !s.onCluster() {
			keys = script.QuotaKeys(keys, v.User)
		}
		callCtx := ctx
		if !handed {
			handed = true
			if p := s.handoff(key); p != nil {
				// The first waiter's try goes right behind this release.
				callCtx = script.WithPair(ctx, p, true)
				defer p.Cancel()
			}
		}
		reply, err := script.ReleaseScript.Run(callCtx, s.clocked(s.scripts), keys, args...).Result()
		if err != nil {
			return script.LockValue{}, script.RedisErr(err)
		}
		if list, ok := reply.([]any); ok && len(list) == 2 {
			switch list[0] {
			case int64(1):
				if user, ok := list[1].(string); ok && user != "" {
					s.uncount(script.QuotaKey(user), script.QuotaMember(key, digest))
				}
				return v, nil
			case int64(-3):
				// The lease counts against another user than v names:
				// it is not v any more (a new grant to the token since):
				// read it again.
				reply = int64(-2)
			}
		}
		code, _ := reply.(int64)
		if err := script.ReleaseCode(code); !errors.Is(err, script.ErrMoved) {
			return v, err
		}
		pinned := v.Fence
		if v, _, err = script.Inspect(ctx, s.scripts, key); err != nil {
			return script.LockValue{}, err
		}
		if forced && v.Digest == digest && v.Fence != pinned {
			// The lease read ended; the holder's token took the key
			// again since (a new grant, a new fence): not the lease this
			// forced release read or named (review fix).
			return script.LockValue{}, lockstore.ErrNotHeld
		}
	}
	return script.LockValue{}, fmt.Errorf("%w: the lease kept changing while it was released (a renewal or an extend of the same token at the same time); release again", lockstore.ErrUnavailable)
}

// recountTries bounds the calls an operation makes to find the quota set
// of the user its lock counts against: the hint, then the user the lock
// names. A third is needed only if the lock changed hands in between.
const recountTries = 3

var errRecount = errors.New("lockstore: the lock's quota user kept changing")

// Inspect implements Store.
func (s *Store) Inspect(ctx context.Context, key string) (lockstore.Lease, error) {
	start := s.now()
	v, remaining, err := script.Inspect(ctx, s.scripts, key)
	if err != nil {
		return lockstore.Lease{}, err
	}
	return v.Found(key, remaining, start), nil
}

// Ping implements Store with a write, so a Redis that answers but refuses
// writes (ErrRefused) is not ready either: it could not grant a lock. (In
// a Cluster the write reaches the one shard that owns readyKey.)
func (s *Store) Ping(ctx context.Context) error {
	if s.acks.replicas == 0 {
		return script.RedisErr(s.client.Set(ctx, script.ReadyKey, "1", time.Minute).Err())
	}
	// With LOCKGW_REDIS_WAIT_REPLICAS every grant waits for replicas: a
	// Redis without enough of them answers every acquire 503, so it is not
	// ready either (ErrReplicas).
	conn, err := s.conn()
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.Set(ctx, script.ReadyKey, "1", time.Minute).Err(); err != nil {
		return script.RedisErr(err)
	}
	return s.acks.await(ctx, conn)
}

// Close implements Store.
func (s *Store) Close() error {
	s.notifier.Close()
	for _, c := range s.sentinels {
		_ = c.Close()
	}
	return s.client.Close()
}

// FenceMargin bounds what a key leaves in Redis after its lease: its fence
// counter lives until Redis TIME has passed it by FenceMargin
// (script.FenceMargin, docs/safety.md, "Fences").
const FenceMargin = script.FenceMargin

// now is the gateway's clock, as rule D's samples read it: a grant's start
// and its told expires_at are on it (the simulator's virtual clock in its
// tests).
func (s *Store) now() time.Time { return s.clocks.Now() }
