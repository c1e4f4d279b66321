package redis

// Rule D on a Cluster (docs/safety.md, "Late grants and late deletes"):
// go-redis's ClusterClient sends a command again on its own, in the loop
// that follows MOVED and ASK (up to MaxRedirects+1 copies; MaxRetries -1
// does not stop it), after an EOF or a reset. The copy a broken connection
// carried may still land (a proxy that had read it), while the call's
// outcome is the last copy's. Found by review: before script.CopyHook, an
// answer came as soon as the last copy answered, and the first copy could
// run after it.

import (
	"bytes"
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// trap: the next count writes that carry match (a script's name on the
// wire) break the gateway's side
// of their connection at once (go-redis reads EOF); the bytes are handed
// to Redis deliver later (a proxy that had read them), or never when
// deliver < 0.
type trap struct {
	match   [][]byte // any of them
	deliver time.Duration
	count   atomic.Int32
	hits    atomic.Int32
}

// trapDialer is a ClusterOptions.Dialer whose connections pass through
// an in-process proxy that springs the traps armed on it.
type trapDialer struct {
	lnMu  sync.Mutex
	ln    net.Listener
	mu    sync.Mutex
	traps []*trap
	late  sync.WaitGroup // deliveries still to come
}

// arm sets a trap for the writes of the script whose SHA1 is sha: the
// EVALSHA that names it, or the FCALL of its function (script.Functions;
// a node client made before New has no such hook and sends EVALSHA).
func (d *trapDialer) arm(sha string, deliver time.Duration, count int32) *trap {
	t := &trap{match: [][]byte{[]byte(sha)}, deliver: deliver}
	if name, ok := script.Library.Function(sha); ok {
		t.match = append(t.match, []byte(name))
	}
	t.count.Store(count)
	d.mu.Lock()
	d.traps = append(d.traps, t)
	d.mu.Unlock()
	return t
}

func (d *trapDialer) spring(chunk []byte) *trap {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, t := range d.traps {
		if slices.ContainsFunc(t.match, func(m []byte) bool { return bytes.Contains(chunk, m) }) && t.count.Load() > 0 {
			t.count.Add(-1)
			if t.deliver >= 0 {
				// Before hits: a test that saw the hit waits for the
				// delivery (late.Wait), never before its Add.
				d.late.Add(1)
			}
			t.hits.Add(1)
			return t
		}
	}
	return nil
}

// pair is a loopback TCP connection: the gateway's end and the proxy's.
func (d *trapDialer) pair(ctx context.Context) (net.Conn, net.Conn, error) {
	d.lnMu.Lock()
	defer d.lnMu.Unlock()
	if d.ln == nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		d.ln = ln
	}
	gw, err := (&net.Dialer{}).DialContext(ctx, "tcp", d.ln.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	px, err := d.ln.Accept()
	if err != nil {
		_ = gw.Close()
		return nil, nil, err
	}
	return gw, px, nil
}

func (d *trapDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	sc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	gw, px, err := d.pair(ctx)
	if err != nil {
		_ = sc.Close()
		return nil, err
	}
	go func() { // replies
		buf := make([]byte, 1<<16)
		for {
			n, err := sc.Read(buf)
			if err != nil {
				_ = px.Close()
				return
			}
			if _, err := px.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	go func() { // commands
		buf := make([]byte, 1<<20)
		for {
			n, err := px.Read(buf)
			if err != nil {
				_ = sc.Close()
				return
			}
			chunk := append([]byte(nil), buf[:n]...)
			if t := d.spring(chunk); t != nil {
				_ = px.(*net.TCPConn).SetLinger(0)
				_ = px.Close() // the gateway's side breaks now (a reset)
				if t.deliver < 0 {
					_ = sc.Close()
					return
				}
				go func() {
					defer d.late.Done()
					time.Sleep(t.deliver)
					_, _ = sc.Write(chunk)
					time.Sleep(300 * time.Millisecond) // let Redis run it
					_ = sc.Close()
				}()
				return
			}
			if _, err := sc.Write(chunk); err != nil {
				_ = px.Close()
				return
			}
		}
	}()
	return gw, nil
}

// trappedClusterStore is a store on c as Open makes it for a Cluster
// (timeouts, MaxRetries -1, MaxRedirects left at go-redis's default),
// whose connections pass through d.
func trappedClusterStore(t *testing.T, c *redistest.Cluster, d *trapDialer, timeout time.Duration) *Store {
	s := New(trappedClusterClient(c, d, timeout))
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// trappedClusterClient is the Cluster client Open makes, its connections
// through d.
func trappedClusterClient(c *redistest.Cluster, d *trapDialer, timeout time.Duration) *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: c.Addrs(), Dialer: d.dial,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
		ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
		MaintNotificationsConfig: noMaintNotifications(),
	})
}

// ownerOf is the master that serves key.
func ownerOf(t *testing.T, c *redistest.Cluster, key string) *redistest.Server {
	ctx := context.Background()
	for _, m := range c.Masters {
		if m.Client().Exists(ctx, key).Err() == nil {
			return m
		}
	}
	t.Fatalf("no master serves %s", key)
	return nil
}

// TestClusterResentGrantLandsBeforeItsAnswer: an acquire whose first copy
// breaks (and lands 1.5 s later) and whose resent copy finds the key held
// is answered 409 only once its deadline has passed, so the first copy,
// landing before it, is before the answer too: the holder's release after
// the 409 leaves the key free. (Before, the 409 came at once, and the first
// copy granted the key after the release: a lease nobody was told of.)
func TestClusterResentGrantLandsBeforeItsAnswer(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	d := &trapDialer{}
	s := trappedClusterStore(t, c, d, 3*time.Second)
	ctx := context.Background()
	key := "resend-grant"

	holder, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 30 * time.Second})
	require.NoError(t, err)

	// The next acquire's first write breaks at the gateway and reaches
	// Redis 1.5 s later; go-redis sends the script again at once.
	tr := d.arm(script.AcquireScript.Hash(), 1500*time.Millisecond, 1)
	loser := lockstore.NewToken()
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	start := time.Now()
	_, err = s.Acquire(actx, key, lockstore.AcquireRequest{Token: loser, TTL: 30 * time.Second})
	cancel()
	answered := time.Since(start)
	require.EqualValues(t, 1, tr.hits.Load(), "the trap caught the acquire's first write")
	require.ErrorIs(t, err, lockstore.ErrHeld)
	t.Logf("acquire answered %v after %v (its first copy lands at 1.5 s)", err, answered.Round(time.Millisecond))

	require.NoError(t, s.Release(ctx, key, holder.Token), "the holder lets go (204)")
	d.late.Wait()

	l, err := s.Inspect(ctx, key)
	if err == nil {
		t.Errorf("rule D: the acquire answered 409 after %v granted the key later (fence %d, %v left): a grant that wrote after its answer; nobody holds this lease",
			answered.Round(time.Millisecond), l.Fence, time.Until(l.ExpiresAt).Round(time.Millisecond))
	} else {
		require.ErrorIs(t, err, lockstore.ErrNotHeld)
	}
}

// TestClusterResentDeleteLandsBeforeItsAnswer: the same resend, on a
// release's delete, removed a lease its holder was answered 200 for after
// the release's 503: a second holder. Now the release is answered after its
// deadline, so its first copy lands before the holder's extends. The cross-server pair is the one
// docs/safety.md names ("Why the pair alone was not enough"): the gateway
// remembers the lease's pair (rule V3) as its source node left it; the
// slot moves to a node whose clock is 20 ms behind, where the lease's
// absolute expiry is 20 ms earlier (staged with PEXPIREAT on the owner:
// MIGRATE moves the remaining TTL); the holder's extends step it back onto
// the remembered pair (V1: +1 ms each). The release's first delete is
// caught by the trap (it lands 2.5 s later), go-redis resends it and gets
// "changed" (-2), and the reads that follow get no answer: the release is
// answered 503, once its deadline has passed (before the fix: at once).
func TestClusterResentDeleteLandsBeforeItsAnswer(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	d := &trapDialer{}
	s := trappedClusterStore(t, c, d, 5*time.Second)
	ctx := context.Background()
	key := "resend-delete"
	lk := script.LockKey(key)
	owner := ownerOf(t, c, lk).Client()

	const ttl, ext = 20 * time.Second, 10 * time.Second
	l, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: ttl})
	require.NoError(t, err)
	// A renewal (the holder's PUT) answers the pair the gateway remembers
	// (V3; on a Cluster an extend's answer is not remembered).
	_, err = s.Acquire(ctx, key, lockstore.AcquireRequest{Token: l.Token, TTL: ext})
	require.NoError(t, err)
	pair, err := owner.PExpireTime(ctx, lk).Result()
	require.NoError(t, err)
	remembered := pair.Milliseconds()
	// The slot's new node, 20 ms behind: the same value, expiring 20 ms
	// earlier by its clock.
	const behind = 20
	require.NoError(t, owner.Do(ctx, "PEXPIREAT", lk, remembered-behind).Err())

	delCopy := d.arm(script.ReleaseScript.Hash(), 2500*time.Millisecond, 1)
	reads := d.arm(script.InspectScript.Hash(), -1, 100)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	start := time.Now()
	err = s.Release(rctx, key, l.Token)
	cancel()
	answered := time.Since(start)
	reads.count.Store(0)
	require.EqualValues(t, 1, delCopy.hits.Load(), "the trap caught the delete's first write")
	t.Logf("reads after 'changed' that got no answer: %d", reads.hits.Load())
	require.ErrorIs(t, err, lockstore.ErrUnavailable)
	t.Logf("release answered %v after %v (its delete's first copy lands at 2.5 s, before its deadline)", err, answered.Round(time.Millisecond))

	// After the 503 the holder extends, each answered 200 with expires_at
	// now + 10 s; the expiry steps by 1 ms onto the remembered pair.
	var told time.Time
	for range behind {
		e, err := s.Extend(ctx, key, l.Token, ext)
		require.NoError(t, err)
		told = e.ExpiresAt
	}
	now, err := owner.PExpireTime(ctx, lk).Result()
	require.NoError(t, err)
	require.Equal(t, remembered, now.Milliseconds(), "the extends stepped the lease onto the remembered pair")
	t.Logf("holder told it holds until %v from now", time.Until(told).Round(time.Millisecond))

	d.late.Wait()
	if v, err := owner.Get(ctx, lk).Result(); err == nil {
		at, _ := owner.PExpireTime(ctx, lk).Result()
		t.Logf("after the copy: %s expires %d (remembered %d)", v, at.Milliseconds(), remembered)
	}
	other, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: ttl})
	if err == nil {
		t.Errorf("rule D: a delete of the release answered 503 after %v landed after the holder's extends were answered 200; another token got the key (fence %d) while the holder was told it holds it %v more: two holders",
			answered.Round(time.Millisecond), other.Fence, time.Until(told).Round(time.Millisecond))
	} else {
		require.ErrorIs(t, err, lockstore.ErrHeld)
	}
}
