package redis

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// readsFrom sends a release's reads (inspect.lua, sem_read.lua) to old and
// every other script on: a gateway whose release read the lease on one
// server and whose delete went to another, as after a Cluster slot
// migration (the delete follows -MOVED) or a Sentinel failover (the delete
// goes out on a connection to the new master).
type readsFrom struct {
	old redis.Scripter
	redis.Scripter
}

func (r readsFrom) reads(sha string) bool {
	return sha == script.InspectScript.Hash() || sha == script.SemReadScript.Hash()
}

func (r readsFrom) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if r.reads(sha) {
		return r.old.EvalSha(ctx, sha, keys, args...)
	}
	return r.Scripter.EvalSha(ctx, sha, keys, args...)
}

func (r readsFrom) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	if r.reads(script.Sha1Hex(src)) {
		return r.old.Eval(ctx, src, keys, args...)
	}
	return r.Scripter.Eval(ctx, src, keys, args...)
}

// switched sends every script to the server it is switched to: a gateway
// whose connections go to a new master after a failover.
type switched struct {
	to atomic.Pointer[redis.Scripter]
}

func (w *switched) switchTo(c redis.Scripter) { w.to.Store(&c) }
func (w *switched) c() redis.Scripter         { return *w.to.Load() }

func (w *switched) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return w.c().Eval(ctx, src, keys, args...)
}
func (w *switched) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return w.c().EvalSha(ctx, sha, keys, args...)
}
func (w *switched) EvalRO(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return w.c().EvalRO(ctx, src, keys, args...)
}
func (w *switched) EvalShaRO(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return w.c().EvalShaRO(ctx, sha, keys, args...)
}
func (w *switched) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return w.c().ScriptExists(ctx, hashes...)
}
func (w *switched) ScriptLoad(ctx context.Context, src string) *redis.StringCmd {
	return w.c().ScriptLoad(ctx, src)
}

// copyKeys gives to the server of to the keys of from exactly as they
// are, value and absolute expiry: the new server has the lease, with the
// (value, expiry) pair the release read on the old one.
func copyKeys(t *testing.T, from, to *redis.Client, keys ...string) {
	t.Helper()
	ctx := context.Background()
	for _, k := range keys {
		dump, err := from.Dump(ctx, k).Result()
		require.NoError(t, err, "DUMP %s", k)
		at, err := from.PExpireTime(ctx, k).Result()
		require.NoError(t, err)
		require.Positive(t, at, "%s has an expiry", k)
		require.NoError(t, to.Do(ctx, "RESTORE", k, at.Milliseconds(), dump, "REPLACE", "ABSTTL").Err())
	}
}

// proxiedStore is a store whose one connection goes to srv through a
// proxy that can turn slow (a call gives up; its bytes land later).
func proxiedStore(t *testing.T, srv *redistest.Server) (*Store, *redistest.Proxy) {
	p := redistest.NewProxy(t, srv.Addr(), 0)
	s := New(redis.NewClient(&redis.Options{
		Addr: p.Addr(), MaxRetries: -1, PoolSize: 1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		ContextTimeoutEnabled: true,
	}))
	t.Cleanup(func() { _ = s.Close() })
	return s, p
}

// TestLateDeleteOnAnotherServer stages docs/safety.md, "Why the pair alone
// was not enough": a release read (value, expiry) on one server, its
// delete went to another server and landed late there, after that server
// was given the same pair by a write answered after the release's 503 (on
// real servers: the holder's renewal on a Cluster node whose clock is
// behind, or its extend on a new master; here the pair is put there
// directly, with RESTORE ABSTTL, since no test can steer two clocks onto
// one millisecond). Rule D binds the delete to the server and the moment
// it was meant for, so it writes nothing; before, it matched and removed
// the lease: a second holder. A permit's release is staged the same way.
func TestLateDeleteOnAnotherServer(t *testing.T) {
	const late = 1500 * time.Millisecond
	oldSrv, newSrv := redistest.Start(t), redistest.Start(t)
	oldRdb, newRdb := oldSrv.Client(), newSrv.Client()
	ctx := context.Background()

	// slow is a gateway whose path to the new server turns slow, and whose
	// reads go to the old one.
	slowGateway := func(t *testing.T) (*Store, *redistest.Proxy) {
		s, p := proxiedStore(t, newSrv)
		s.scripts = readsFrom{old: oldRdb, Scripter: s.scripts}
		// Sample the new server's clock while the path is fast, as a
		// gateway that has been serving has (rule D), open the connection
		// and load the scripts, so that only the delete's own bytes are
		// late (a late EVALSHA of a script the server lacks runs nothing).
		for _, sc := range []*redis.Script{script.ReleaseScript, script.SemReleaseScript} {
			require.NoError(t, sc.Load(ctx, newRdb).Err())
		}
		_, err := s.Acquire(ctx, "late-server/sample", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
		require.NoError(t, err)
		return s, p
	}
	giveUp := func(t *testing.T, p *redistest.Proxy, op func(ctx context.Context) error) {
		p.SetDelay(late)
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, op(ctx), lockstore.ErrUnavailable, "the slow gateway gives up on the delete")
	}
	oldStore, newStore := openInternal(t, oldSrv), openInternal(t, newSrv)

	t.Run("a lock", func(t *testing.T) {
		const key = "late-server/lock"
		slow, p := slowGateway(t)
		token := lockstore.NewToken()
		_, err := oldStore.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: 20 * time.Second})
		require.NoError(t, err)
		giveUp(t, p, func(ctx context.Context) error { return slow.Release(ctx, key, token) })
		// Answered after the 503: the new server holds the lease, with
		// the pair the release read.
		copyKeys(t, oldRdb, newRdb, script.LockKey(key))

		time.Sleep(late + 300*time.Millisecond)
		_, err = newStore.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
		require.ErrorIs(t, err, lockstore.ErrHeld, "the late delete removed a lease answered after its 503")
	})

	t.Run("a permit", func(t *testing.T) {
		const key = "late-server/permit"
		slow, p := slowGateway(t)
		token := lockstore.NewToken()
		_, err := oldStore.SemAcquire(ctx, key, lockstore.PermitRequest{Token: token, Limit: 1, TTL: 20 * time.Second})
		require.NoError(t, err)
		giveUp(t, p, func(ctx context.Context) error { return slow.SemRelease(ctx, key, token) })
		copyKeys(t, oldRdb, newRdb, script.SemPermitsKey(key), script.SemExpiryKey(key))

		time.Sleep(late + 300*time.Millisecond)
		_, err = newStore.SemAcquire(ctx, key, lockstore.PermitRequest{Token: lockstore.NewToken(), Limit: 1, TTL: time.Second})
		require.True(t, errors.Is(err, lockstore.ErrSemaphoreFull), "the late delete removed a permit answered after its 503: %v", err)
	})

	// Rule V3: the pair a release sends at once is the one its gateway's
	// grant was answered on the old server; after a failover the delete
	// goes to the new master, late, where a write answered after the
	// release's 503 left that same pair.
	t.Run("a lock, with the pair the grant was answered", func(t *testing.T) {
		const key = "late-server/remembered"
		s, p := proxiedStore(t, newSrv)
		paths := &switched{}
		paths.switchTo(oldRdb)
		toNew := s.scripts
		s.scripts = paths
		token := lockstore.NewToken()
		_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: 20 * time.Second})
		require.NoError(t, err)
		paths.switchTo(toNew) // the failover: from now on the new master
		require.NoError(t, script.ReleaseScript.Load(ctx, newRdb).Err())
		_, err = s.Acquire(ctx, "late-server/sample", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
		require.NoError(t, err, "a grant on the new master (its clock sampled once the old one's run id was refused)")
		before, err := newSrv.CommandCalls(ctx)
		require.NoError(t, err)
		giveUp(t, p, func(ctx context.Context) error { return s.Release(ctx, key, token) })
		copyKeys(t, oldRdb, newRdb, script.LockKey(key))

		time.Sleep(late + 300*time.Millisecond)
		after, err := newSrv.CommandCalls(ctx)
		require.NoError(t, err)
		require.Equal(t, before["evalsha"]+before["fcall"]+1, after["evalsha"]+after["fcall"], "the release sent one script, the remembered pair's delete, and no read")
		_, err = newStore.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
		require.ErrorIs(t, err, lockstore.ErrHeld, "the late delete removed a lease answered after its 503")
	})

	// The run id: a delete whose deadline was made from the old server's
	// clock writes nothing on the new one, even before that deadline (the
	// new server's clock may be behind, so its TIME reads less than the
	// deadline after the gateway answered 503).
	t.Run("a delete with another server's deadline", func(t *testing.T) {
		const key = "late-server/run-id"
		token := lockstore.NewToken()
		_, err := oldStore.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: 20 * time.Second})
		require.NoError(t, err)
		v, _, err := script.Inspect(ctx, oldRdb, key)
		require.NoError(t, err)
		copyKeys(t, oldRdb, newRdb, script.LockKey(key))

		clocks := script.NewClocks(time.Second, false)
		deadline, _, err := clocks.Deadline(ctx, oldRdb, script.LockKey(key))
		require.NoError(t, err)
		keys, args := script.ReleaseCall(key, v.Digest, script.PublishAll, v, true)
		err = script.ReleaseScript.Run(ctx, newRdb, keys, append(args, deadline)...).Err()
		require.True(t, script.IsReply(err, script.ClockReply), "the new server refuses a deadline of the old one's clock: %v", err)
		_, err = newStore.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Second})
		require.ErrorIs(t, err, lockstore.ErrHeld, "the delete meant for the old server removed the lease on the new one")
	})
}
