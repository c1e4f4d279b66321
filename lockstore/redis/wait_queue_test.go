package redis_test

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

// A waiting acquire on a key others of the same gateway already wait for
// queues itself with its first try: one script, not a try and then a
// queued try. It is still granted in its turn, after the waiters before
// it.
func TestWaiterJoinsALineInOneScript(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s := backendtest.NewRedis(t, srv)
	const key = "line/one-script"
	queue := "lockgw:{" + key + "}:queue"

	holder := lockstore.NewToken()
	_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: holder, TTL: time.Minute})
	require.NoError(t, err)

	type result struct {
		token string
		err   error
	}
	granted := make(chan result, 2)
	wait := func(token string) {
		_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: token, TTL: time.Minute, Wait: 20 * time.Second})
		granted <- result{token, err}
	}
	queued := func(n int64) func() bool {
		return func() bool { return srv.Client().ZCard(ctx, queue).Val() == n }
	}

	first, second := lockstore.NewToken(), lockstore.NewToken()
	alone := scripts(t, srv, func() {
		go wait(first)
		require.Eventually(t, queued(1), 5*time.Second, time.Millisecond)
	})
	assert.EqualValues(t, 2, alone, "the first waiter: a try, then a queued try")
	behind := scripts(t, srv, func() {
		go wait(second)
		require.Eventually(t, queued(2), 5*time.Second, time.Millisecond)
	})
	assert.EqualValues(t, 1, behind, "the second waiter: one queued try")

	require.NoError(t, s.Release(ctx, key, holder))
	r := <-granted
	require.NoError(t, r.err)
	assert.Equal(t, first, r.token, "granted in arrival order")
	require.NoError(t, s.Release(ctx, key, first))
	r = <-granted
	require.NoError(t, r.err)
	assert.Equal(t, second, r.token)
}

// scripts counts the scripts srv ran during op.
func scripts(t *testing.T, srv *redistest.Server, op func()) int64 {
	t.Helper()
	// MONITOR, not INFO commandstats: a store also samples its server's
	// clock (rule D's clock.lua) whenever its sample has aged past its
	// refresh, which under make test's load fell inside op now and then
	// and counted as op's own.
	// Every script in the server's cache first: a store whose functions
	// library is not known loaded yet (its load runs aside) sends a
	// script as EVALSHA, and one another store has only run as a
	// function is then answered NOSCRIPT and sent again as EVAL, which
	// MONITOR shows as two calls.
	for _, src := range script.Sources {
		require.NoError(t, srv.Client().ScriptLoad(context.Background(), src).Err())
	}
	mon, err := net.Dial("tcp", srv.Addr())
	require.NoError(t, err)
	defer mon.Close()
	_, err = mon.Write([]byte("MONITOR\r\n"))
	require.NoError(t, err)
	lines := bufio.NewReader(mon)
	ok, err := lines.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "+OK\r\n", ok)
	op()
	marker := lockstore.NewToken()
	require.NoError(t, srv.Client().Echo(context.Background(), marker).Err())
	clock := `"` + script.ClockScript.Hash() + `"`
	var n int64
	for {
		require.NoError(t, mon.SetReadDeadline(time.Now().Add(10*time.Second)))
		line, err := lines.ReadString('\n')
		require.NoError(t, err, "the monitor's line for the marker")
		if strings.Contains(line, marker) {
			return n
		}
		// `+<time> [<db> <client>] "<command>" …`; a script's own calls
		// come from the client "lua".
		_, rest, _ := strings.Cut(line, "] ")
		command, _, _ := strings.Cut(rest, " ")
		switch {
		case strings.Contains(line, " lua] "), strings.Contains(line, clock):
		case strings.EqualFold(command, `"evalsha"`), strings.EqualFold(command, `"eval"`), strings.EqualFold(command, `"fcall"`):
			n++
		}
	}
}

// The grant that makes a waiter the first tells it how long the new lease
// is: it sleeps until then without a try of its own to learn it, and takes
// the key when that lease runs out unreleased.
func TestFirstWaiterToldTheLeaseLength(t *testing.T) {
	l := newHeldLine(t, "line/told")
	first := l.join(lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 400 * time.Millisecond, Wait: 20 * time.Second})
	second := l.join(lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute, Wait: 20 * time.Second})

	n := scripts(t, l.srv, func() {
		require.NoError(t, l.s.Release(context.Background(), l.key, l.holder))
		require.NoError(t, <-first)
		time.Sleep(50 * time.Millisecond) // room for a try the second waiter must not make
	})
	assert.EqualValues(t, 2, n, "the release and the first waiter's grant; the second waiter, told it is first and for how long, tries nothing")
	select {
	case err := <-second:
		require.Fail(t, "the second waiter answered before the first's lease ran out", "%v", err)
	default:
	}

	// The first waiter's lease (400 ms) runs out unreleased: the second
	// takes the key then.
	require.NoError(t, <-second)
}

// A waiting PUT retried while it waits (a client that timed out and sent
// it again, same token) leaves a twin in the queue behind it. When the
// first is granted, the twin is told it is first, of a lease of its own
// token: it tries at once and is answered the renewal, instead of sleeping
// until that lease (a minute) runs out.
func TestTwinToldOfItsOwnLeaseTries(t *testing.T) {
	l := newHeldLine(t, "line/twin")
	req := lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute, Wait: 5 * time.Second}
	first, twin := l.join(req), l.join(req)

	require.NoError(t, l.s.Release(context.Background(), l.key, l.holder))
	start := time.Now()
	require.NoError(t, <-first, "the first of the twins")
	require.NoError(t, <-twin, "the second twin: its own token's lease, renewed")
	assert.Less(t, time.Since(start), 4*time.Second, "the second twin did not sleep out its wait")
}

// heldLine is a store on a Redis of its own, the lock scripts loaded, with
// key held for a minute by holder; join starts waiting acquires behind it.
type heldLine struct {
	t           *testing.T
	srv         *redistest.Server
	s           lockstore.Store
	key, holder string
	queued      int64
}

func newHeldLine(t *testing.T, key string) *heldLine {
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	warmUp(t, s)
	l := &heldLine{t: t, srv: srv, s: s, key: key, holder: lockstore.NewToken()}
	_, err := s.Acquire(context.Background(), key, lockstore.AcquireRequest{Token: l.holder, TTL: time.Minute})
	require.NoError(t, err)
	return l
}

// join starts a waiting acquire of req and returns once it is in the
// key's queue, last; its answer comes on the channel.
func (l *heldLine) join(req lockstore.AcquireRequest) <-chan error {
	answer := make(chan error, 1)
	go func() {
		_, err := l.s.Acquire(context.Background(), l.key, req)
		answer <- err
	}()
	l.queued++
	queue := "lockgw:{" + l.key + "}:queue"
	require.Eventually(l.t, func() bool { return l.srv.Client().ZCard(context.Background(), queue).Val() == l.queued }, 5*time.Second, time.Millisecond)
	return answer
}

// warmUp loads the lock scripts on the store's Redis (a first EVALSHA is
// answered NOSCRIPT and sent again as EVAL), so that counts of scripts and
// writes are the calls'.
func warmUp(t *testing.T, s lockstore.Store) {
	t.Helper()
	ctx := context.Background()
	warm := lockstore.NewToken()
	_, err := s.Acquire(ctx, "line/warm", lockstore.AcquireRequest{Token: warm, TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, "line/warm", warm))
}
