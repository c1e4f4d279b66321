package lockstore

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgateway/lockgateway/internal/sleep"
)

// Semaphores on Redis: the layout, and why slots, are in
// lua/sem_common.lua, which every sem_*.lua script starts with.

var (
	//go:embed lua/sem_common.lua
	semCommonLua string

	//go:embed lua/sem_acquire.lua
	semAcquireLua    string
	semAcquireScript = redis.NewScript(deadlineLua + semCommonLua + semAcquireLua) // rule D: clock.go

	//go:embed lua/sem_extend.lua
	semExtendLua    string
	semExtendScript = redis.NewScript(semCommonLua + semExtendLua)

	//go:embed lua/sem_release.lua
	semReleaseLua    string
	semReleaseScript = redis.NewScript(semCommonLua + semReleaseLua)

	//go:embed lua/sem_read.lua
	semReadLua    string
	semReadScript = redis.NewScript(semCommonLua + semReadLua)

	//go:embed lua/sem_inspect.lua
	semInspectLua    string
	semInspectScript = redis.NewScript(semCommonLua + semInspectLua)

	//go:embed lua/sem_discard.lua
	semDiscardLua    string
	semDiscardScript = redis.NewScript(semCommonLua + semDiscardLua)

	//go:embed lua/sem_confirm.lua
	semConfirmLua    string
	semConfirmScript = redis.NewScript(deadlineLua + semCommonLua + semConfirmLua) // rule D: clock.go

	//go:embed lua/sem_unwait.lua
	semUnwaitLua    string
	semUnwaitScript = redis.NewScript(semCommonLua + semUnwaitLua)

	//go:embed lua/sem_leave.lua
	semLeaveLua    string
	semLeaveScript = redis.NewScript(semLeaveLua)
)

// A semaphore's Redis keys share the hash tag {sem#<key>}: one Cluster
// slot, apart from the lock of the same name. '#' is not in the key
// alphabet, so no lock's keys can be a semaphore's: with "{sem:<key>}",
// the lock "sem:x" shared its fence counter, queue and channel with the
// semaphore "x" (each overwrote the other's counter, and their waiters
// queued as one).
const semTag = "sem#"

func semPermitsKey(key string) string { return "lockgw:{" + semTag + key + "}:permits" }
func semExpiryKey(key string) string  { return "lockgw:{" + semTag + key + "}:expiry" }
func semFenceKey(key string) string   { return "lockgw:{" + semTag + key + "}:fence" }
func semQueueKey(key string) string   { return "lockgw:{" + semTag + key + "}:queue" }
func semAliveKey(key string) string   { return "lockgw:{" + semTag + key + "}:alive" }
func semChannel(key string) string    { return "lockgw:{" + semTag + key + "}:released" }

var _ Semaphores = (*Redis)(nil)

// SemAcquire implements Semaphores. With LOCKGW_REDIS_WAIT_REPLICAS a
// grant is answered only once the replicas acknowledged it (semAcquire).
func (s *Redis) SemAcquire(ctx context.Context, key string, req PermitRequest) (Permit, error) {
	if err := CheckPermit(key, req); err != nil {
		return Permit{}, err
	}
	start := time.Now()
	a := semArgs{digest: digestHex(req.Token), ttl: req.TTL, owner: req.Owner, limit: req.Limit, publish: s.publish}
	r, err := s.semAcquire(ctx, key, a)
	if err != nil {
		return Permit{}, err
	}
	if r.code == semRefused && req.Wait > 0 {
		return s.semWait(ctx, key, a, req, start)
	}
	return r.permit(key, req, start)
}

func (s *Redis) semAcquire(ctx context.Context, key string, a semArgs) (semResult, error) {
	if s.acks.replicas == 0 {
		return nodeSemAcquire(ctx, s.grants(s.scripts), key, a)
	}
	conn, err := s.conn()
	if err != nil {
		return semResult{}, err
	}
	defer conn.Close()
	r, err := nodeSemAcquire(ctx, s.grants(conn), key, a)
	if err != nil || (r.code != semNew && r.code != semRenewed) {
		return r, err
	}
	if err := s.acks.await(ctx, conn); err != nil {
		if r.code == semNew {
			s.semUnwait(ctx, key, r.slot, r.value.raw)
		}
		return semResult{}, err
	}
	return r, nil
}

// semUnwait takes back a new permit the replicas did not acknowledge, as
// unwait does a lock's, if its slot is still exactly what the grant left
// (sem_unwait.lua: a renewal or extend by the same token since, which may
// have been answered 200, always changes it). A renewal is left as it is,
// for acquireAcked's reason. When the take-back cannot run (the master
// died), the permit is left to its TTL: one place of the key nobody was
// told it holds, never one more holder than the limit.
func (s *Redis) semUnwait(ctx context.Context, key string, slot int, value string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.acks.timeout)
	defer cancel()
	keys := []string{semPermitsKey(key), semExpiryKey(key), semQueueKey(key)}
	_ = semUnwaitScript.Run(ctx, s.client, keys, slot, value, semChannel(key), s.publish).Err()
}

// semWait queues the caller and takes a permit when it is its turn: woken
// by a release, grant or leave that names its ticket, by the first
// permit's expiry (the first waiter sleeps until then), or by its
// gateway's heartbeat when a permit is free for it and the notification
// was lost (sem_room.go). Between those it runs no script at all.
func (s *Redis) semWait(ctx context.Context, key string, a semArgs, req PermitRequest, start time.Time) (Permit, error) {
	deadline := start.Add(req.Wait)
	a.ticket = waitTicket{id: s.rooms.ticket(), heartbeat: waitHeartbeat}
	// Listen before queueing, so a release between the two is not missed.
	wake := make(chan struct{}, 1)
	if err := s.notifier.listen(ctx, semChannel(key), a.ticket.id, wake); err != nil {
		return Permit{}, err
	}
	defer s.notifier.stop(semChannel(key), a.ticket.id)
	rm, w := s.enter(key, true, a.ticket.id, wake)
	granted := false
	defer func() {
		s.part(rm, w) // first, so the heartbeat does not take the leave for a lost queue
		if !granted {
			s.semLeave(key, a.ticket.id)
		}
	}()
	backoff := 10 * time.Millisecond
	for {
		attempt := time.Now()
		rm.trying(w)
		r, err := s.semAcquire(ctx, key, a)
		rm.tried(w, err == nil && r.code == semRefused)
		if err != nil {
			// As Redis.wait: a call that got no answer is tried again,
			// same token and ticket, until the wait runs out (a grant
			// whose answer was lost comes back as this token's renewal);
			// a Redis that refuses writes, or an ended context, ends it.
			left := time.Until(deadline)
			if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrRefused) || ctx.Err() != nil || left <= 0 {
				return Permit{}, err
			}
			pause := min(backoff/2+rand.N(backoff/2), left)
			backoff = min(2*backoff, waitRefresh)
			if !sleep.For(ctx, pause) {
				return Permit{}, ctx.Err()
			}
			continue
		}
		backoff = 10 * time.Millisecond
		if r.code != semRefused {
			granted = r.code == semNew || r.code == semRenewed
			return r.permit(key, req, attempt)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return r.permit(key, req, attempt)
		}
		// Sleep until told; the first waiter wakes when the first permit
		// runs out, in case its holder died.
		nap := left
		if r.head && r.remaining > 0 {
			nap = min(nap, r.remaining+time.Millisecond)
		}
		if _, ok := sleep.Until(ctx, nap, wake); !ok {
			return Permit{}, ctx.Err()
		}
	}
}

// semLeave takes a waiter out of the queue under a context of its own; if
// it fails, the heartbeat drops the entry within waitHeartbeat.
func (s *Redis) semLeave(key, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = semLeaveScript.Run(ctx, s.client, []string{semQueueKey(key), semAliveKey(key)}, id, semChannel(key), s.publish).Err()
}

// SemExtend implements Semaphores.
func (s *Redis) SemExtend(ctx context.Context, key, token string, ttl time.Duration) (Permit, error) {
	if err := CheckExtend(key, token, ttl); err != nil {
		return Permit{}, err
	}
	start := time.Now()
	var c = s.scripts
	var conn *redis.Conn
	if s.acks.replicas > 0 {
		var err error
		if conn, err = s.conn(); err != nil {
			return Permit{}, err
		}
		defer conn.Close()
		c = conn
	}
	v, err := nodeSemExtend(ctx, c, key, digestHex(token), ttl, false, s.publish)
	if err == nil && conn != nil {
		err = s.acks.await(ctx, conn)
	}
	if err != nil {
		return Permit{}, err
	}
	return v.permit(key, token, v.limit, start), nil
}

// SemRelease implements Semaphores.
func (s *Redis) SemRelease(ctx context.Context, key, token string) error {
	if err := CheckRelease(key, token); err != nil {
		return err
	}
	return nodeSemReleaseAsRead(ctx, s.scripts, key, digestHex(token), s.publish, 0)
}

// SemForceRelease implements Forcer: SemRelease of the permit with fence,
// its holder's digest taken from a read in place of the caller's token's.
func (s *Redis) SemForceRelease(ctx context.Context, key string, fence int64) (Permit, error) {
	if err := CheckForce(key, fence, true); err != nil {
		return Permit{}, err
	}
	limit, vs, err := nodeSemInspect(ctx, s.scripts, key)
	if err != nil {
		return Permit{}, err
	}
	i := slices.IndexFunc(vs, func(v semValue) bool { return v.fence == fence })
	if i < 0 {
		return Permit{}, ErrNotHeld
	}
	v := vs[i]
	if err := nodeSemReleaseAsRead(ctx, s.scripts, key, v.digest, s.publish, fence); err != nil {
		return Permit{}, forcedErr(err)
	}
	return Permit{Key: key, Owner: v.owner, Limit: limit, Fence: v.fence, Granted: v.length}, nil
}

// SemInspect implements Semaphores.
func (s *Redis) SemInspect(ctx context.Context, key string) (SemaphoreState, error) {
	start := time.Now()
	limit, vs, err := nodeSemInspect(ctx, s.scripts, key)
	if err != nil {
		return SemaphoreState{}, err
	}
	st := SemaphoreState{Key: key, Limit: limit}
	for _, v := range vs {
		p := v.permit(key, "", limit, start)
		p.Left, p.ExpiresAt = v.left, start.Add(v.left)
		st.Holders = append(st.Holders, p)
	}
	SortHolders(st.Holders)
	return st, nil
}

// The nodeSem* functions run one semaphore script on one Redis node, for
// Redis and for each of Redlock's nodes.

type semCode int64

const (
	semRefused  semCode = 0
	semNew      semCode = 1
	semRenewed  semCode = 2
	semMismatch semCode = 5
	semElsewise semCode = 6 // Redlock: the token holds another slot here
)

// semArgs is what one sem_acquire.lua call needs besides the key.
type semArgs struct {
	digest  string
	ttl     time.Duration
	owner   string
	limit   int
	slot    int    // 0: any free slot (Redis)
	attempt string // Redlock's round id; "" for Redis
	seed    int64  // Redlock's fence seed (µs); 0: Redis TIME
	// provisional: how long a new Redlock value lives until a round
	// confirms it (Redlock.provisional); 0 for Redis.
	provisional time.Duration
	ticket      waitTicket
	publish     string
}

type semResult struct {
	code      semCode
	value     semValue      // granted or renewed
	slot      int           // granted, renewed, elsewise
	remaining time.Duration // refused, mismatch
	head      bool          // refused
	freeCount int           // refused: how many permits are free on this node
	free      []int         // refused: some free slots on this node (Redlock)
	limit     int           // mismatch: the holders' limit
	asked     int           // the limit asked for
	floor     int64         // renewed (Redlock): the vote the node would cast now
}

// permit is the caller's answer from a node's reply: the permit, or the
// error a refusal or a mismatch means.
func (r semResult) permit(key string, req PermitRequest, start time.Time) (Permit, error) {
	switch r.code {
	case semNew, semRenewed:
		p := r.value.permit(key, req.Token, req.Limit, start)
		p.Renewed = r.code == semRenewed
		return p, nil
	case semMismatch:
		return Permit{}, &LimitMismatchError{Limit: r.limit, Remaining: r.remaining}
	}
	return Permit{}, &FullError{Limit: req.Limit, Remaining: r.remaining}
}

func nodeSemAcquire(ctx context.Context, c clocked, key string, a semArgs) (semResult, error) {
	keys := []string{semPermitsKey(key), semExpiryKey(key), semFenceKey(key), semQueueKey(key), semAliveKey(key)}
	args := []any{a.digest, a.ttl.Milliseconds(), a.owner, a.limit, a.slot, a.attempt, a.seed,
		FenceMargin.Milliseconds(), a.ticket.id, a.ticket.heartbeat.Milliseconds(), semChannel(key), cmp.Or(a.publish, publishAll),
		a.provisional.Milliseconds()}
	reply, err := semAcquireScript.Run(ctx, c, keys, args...).Slice()
	if err != nil {
		return semResult{}, redisErr(err)
	}
	bad := fmt.Errorf("lockstore: sem_acquire script replied %v", reply)
	if len(reply) < 2 {
		return semResult{}, bad
	}
	code, _ := reply[0].(int64)
	r := semResult{code: semCode(code), asked: a.limit}
	switch r.code {
	case semNew, semRenewed:
		if len(reply) != 3 && len(reply) != 4 {
			return semResult{}, bad
		}
		slot, _ := reply[2].(int64)
		r.slot = int(slot)
		if len(reply) == 4 {
			fs, _ := reply[3].(string)
			r.floor, _ = strconv.ParseInt(fs, 10, 64)
		}
		r.value, err = parseSemValue(r.slot, reply[1])
		return r, err
	case semRefused:
		ms, _ := reply[1].(int64)
		r.remaining = pttlDuration(ms)
		r.head = len(reply) > 2 && reply[2] == int64(1)
		if len(reply) > 3 {
			free, _ := reply[3].(int64)
			r.freeCount = int(free)
		}
		for _, f := range reply[min(4, len(reply)):] {
			if s, ok := f.(int64); ok {
				r.free = append(r.free, int(s))
			}
		}
		return r, nil
	case semMismatch:
		limit, _ := reply[1].(int64)
		r.limit = int(limit)
		if len(reply) > 2 {
			ms, _ := reply[2].(int64)
			r.remaining = pttlDuration(ms)
		}
		return r, nil
	case semElsewise:
		slot, _ := reply[1].(int64)
		r.slot = int(slot)
		return r, nil
	}
	return semResult{}, bad
}

// nodeSemExtend resets the TTL of digest's permit; with longer (Redlock)
// it only ever lengthens it.
func nodeSemExtend(ctx context.Context, c redis.Scripter, key, digest string, ttl time.Duration, longer bool, publish string) (semValue, error) {
	keys, args := semExtendArgs(key, digest, ttl, longer, publish)
	reply, err := semExtendScript.Run(ctx, c, keys, args...).Slice()
	if err != nil {
		return semValue{}, redisErr(err)
	}
	return semExtendReply(reply)
}

// semExtendArgs are sem_extend.lua's keys and arguments.
func semExtendArgs(key, digest string, ttl time.Duration, longer bool, publish string) ([]string, []any) {
	keys, args := []string{semPermitsKey(key), semExpiryKey(key)}, []any{digest, ttl.Milliseconds(), ""}
	if longer {
		args[2] = "1"
	}
	return keys, append(args, cmp.Or(publish, publishAll))
}

// semExtendReply reads sem_extend.lua's reply.
func semExtendReply(reply []any) (semValue, error) {
	if len(reply) == 0 {
		return semValue{}, fmt.Errorf("lockstore: sem_extend script replied %v", reply)
	}
	code, _ := reply[0].(int64)
	switch {
	case code == 0:
		return semValue{}, ErrNotHeld
	case code == -1:
		return semValue{}, ErrTokenMismatch
	case code == 1 && len(reply) == 4:
		slot, _ := reply[2].(int64)
		limit, _ := reply[3].(int64)
		v, err := parseSemValue(int(slot), reply[1])
		v.limit = int(limit)
		return v, err
	}
	return semValue{}, fmt.Errorf("lockstore: sem_extend script replied %v", reply)
}

// nodeSemReleaseAsRead releases digest's permit on one node in two steps,
// as Redis.Release does a lock's (docs/safety.md, "Late writes on redis",
// rule V2): it reads the permit, then deletes it only as read. When a
// write of the same token changed it in between, it reads again, a few
// times.
func nodeSemReleaseAsRead(ctx context.Context, c redis.Scripter, key, digest, publish string, fence int64) error {
	for range releaseReads {
		v, err := nodeSemRead(ctx, c, key, digest)
		if err != nil {
			return err
		}
		if fence != 0 && v.fence != fence {
			// A forced release of the permit of fence: the token's permit
			// now is another (review fix).
			return ErrNotHeld
		}
		if err := nodeSemRelease(ctx, c, key, digest, publish, v); !errors.Is(err, errMoved) {
			return err
		}
	}
	return fmt.Errorf("%w: the permit kept changing while it was released (a renewal or an extend of the same token at the same time); release again", ErrUnavailable)
}

// nodeSemRead reads digest's permit on one node (sem_read.lua).
func nodeSemRead(ctx context.Context, c redis.Scripter, key, digest string) (semValue, error) {
	reply, err := semReadScript.Run(ctx, c, []string{semPermitsKey(key), semExpiryKey(key)}, digest).Slice()
	if err != nil {
		return semValue{}, redisErr(err)
	}
	if len(reply) == 2 {
		slot, _ := reply[1].(int64)
		return parseSemValue(int(slot), reply[0])
	}
	if len(reply) == 1 {
		switch reply[0] {
		case int64(0):
			return semValue{}, ErrNotHeld
		case int64(-1):
			return semValue{}, ErrTokenMismatch
		}
	}
	return semValue{}, fmt.Errorf("lockstore: sem_read script replied %v", reply)
}

// nodeSemRelease deletes digest's permit if it is still v, as read.
func nodeSemRelease(ctx context.Context, c redis.Scripter, key, digest, publish string, v semValue) error {
	args := []any{digest, semChannel(key), cmp.Or(publish, publishAll), v.raw}
	code, err := semReleaseScript.Run(ctx, c, []string{semPermitsKey(key), semExpiryKey(key), semQueueKey(key)}, args...).Int64()
	if err != nil {
		return redisErr(err)
	}
	return releaseCode(code)
}

// nodeSemInspect reads a semaphore's permits on one node.
func nodeSemInspect(ctx context.Context, c redis.Scripter, key string) (int, []semValue, error) {
	reply, err := semInspectScript.Run(ctx, c, []string{semPermitsKey(key), semExpiryKey(key)}).Slice()
	if err != nil {
		return 0, nil, redisErr(err)
	}
	if len(reply) == 0 {
		return 0, nil, ErrNotHeld
	}
	if len(reply) < 4 || len(reply)%2 != 0 {
		return 0, nil, fmt.Errorf("lockstore: sem_inspect script replied %d items", len(reply))
	}
	limit, _ := reply[0].(int64)
	now, _ := reply[1].(int64)
	var vs []semValue
	for i := 2; i < len(reply); i += 2 {
		slot, _ := reply[i].(int64)
		v, err := parseSemValue(int(slot), reply[i+1])
		if err != nil {
			return 0, nil, err
		}
		v.left = pttlDuration(v.exp - now)
		vs = append(vs, v)
	}
	return int(limit), vs, nil
}

// semValue is a permit's stored value, parsed (lua/sem_common.lua):
// "<expiry ms>:<digest>:<field>:<fence>+<ms>:<owner>".
type semValue struct {
	slot   int
	raw    string // the stored value as read
	exp    int64  // Redis TIME, ms
	digest string
	field  string // "-" on Redis, the attempt field on Redlock
	fence  int64
	// confirmed: a Redlock round confirmed the fence ("+0<ms>",
	// sem_confirm.lua).
	confirmed bool
	length    time.Duration
	owner     string
	left      time.Duration // from nodeSemInspect
	limit     int           // from nodeSemExtend: the limit the hash records
}

// provisional says whether v is a Redlock round's value that no round
// confirmed yet: no permit, until one does (docs/safety.md, rule A).
func (v semValue) provisional() bool {
	return strings.HasPrefix(v.field, "~") && !v.confirmed
}

func parseSemValue(slot int, reply any) (semValue, error) {
	s, ok := reply.(string)
	if !ok {
		return semValue{}, fmt.Errorf("lockstore: permit value is %T, not a string", reply)
	}
	parts := strings.SplitN(s, ":", 5)
	if len(parts) != 5 || len(parts[1]) != 64 {
		return semValue{}, errors.New("lockstore: malformed permit value")
	}
	fence, length, _ := strings.Cut(parts[3], "+")
	exp, err1 := strconv.ParseInt(parts[0], 10, 64)
	f, err2 := strconv.ParseInt(fence, 10, 64)
	ms, err3 := strconv.ParseInt(length, 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return semValue{}, fmt.Errorf("lockstore: malformed permit value: %w", err)
	}
	return semValue{slot: slot, raw: s, exp: exp, digest: parts[1], field: parts[2], fence: f,
		confirmed: strings.HasPrefix(length, "0"), length: time.Duration(ms) * time.Millisecond, owner: parts[4]}, nil
}

// permit: ttl 0 means the value's recorded length (an extend without a
// TTL). start was read before the script ran, so start+length is never
// later than the expiry Redis applied.
func (v semValue) permit(key, token string, limit int, start time.Time) Permit {
	return Permit{Key: key, Token: token, Owner: v.owner, Limit: limit, Fence: v.fence,
		Granted: v.length, ExpiresAt: start.Add(v.length)}
}
