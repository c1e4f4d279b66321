package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echoScript replies its first argument: a caller that got another's reply
// would see it.
var echoScript = redis.NewScript(`return ARGV[1]`)

// batchClient is a client set up as NewRedlock sets up a node's.
func batchClient(t *testing.T, addr string, timeout time.Duration) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, PipelinePoolSize: -1,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, DisableIdentity: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Calls that arrive while writes to the node are on the wire go out
// together, one pipeline for all of them, and each caller gets its own
// reply. The script is not loaded: the first replies are NOSCRIPT, and
// each caller's fallback to EVAL is batched too.
func TestRedlockBatchConcurrentCallsShareWrites(t *testing.T) {
	const oneWay = 25 * time.Millisecond
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr(), oneWay)
	b := script.NewBatch(batchClient(t, proxy.Addr(), 5*time.Second), 5*time.Second)
	ctx := context.Background()
	require.NoError(t, b.Client.Ping(ctx).Err()) // one connection open

	const callers = 40
	for round := range 2 { // NOSCRIPT then EVAL; then EVALSHA
		b.Writes.Store(0)
		b.Calls.Store(0)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				want := fmt.Sprintf("caller %d round %d", i, round)
				got, err := echoScript.Run(ctx, b, nil, want).Text()
				assert.NoError(t, err)
				assert.Equal(t, want, got, "a caller got another's reply")
			})
		}
		wg.Wait()
		calls, writes := b.Calls.Load(), b.Writes.Load()
		t.Logf("round %d: %d calls in %d writes", round, calls, writes)
		assert.GreaterOrEqual(t, calls, int64(callers))
		assert.LessOrEqual(t, writes, calls/4, "concurrent calls were not batched")
	}
	b.Mu.Lock()
	defer b.Mu.Unlock()
	assert.Zero(t, b.Senders, "a sender's place was not given back")
	assert.Empty(t, b.Queue)
}

// A call made while nothing is on the wire goes out at once, alone: it
// waits for no batch to form.
func TestRedlockBatchLoneCallGoesOutAtOnce(t *testing.T) {
	const oneWay = 150 * time.Millisecond // 50 ms left a loaded machine 19 ms short of the bound below
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr(), oneWay)
	b := script.NewBatch(batchClient(t, proxy.Addr(), 5*time.Second), 5*time.Second)
	ctx := context.Background()
	require.NoError(t, echoScript.Load(ctx, b.Client).Err())

	var slowest time.Duration
	for i := range 5 {
		start := time.Now()
		got, err := echoScript.Run(ctx, b, nil, i).Int()
		slowest = max(slowest, time.Since(start))
		require.NoError(t, err)
		require.Equal(t, i, got)
	}
	assert.Equal(t, int64(5), b.Writes.Load(), "a lone call was not its own write")
	assert.Equal(t, int64(5), b.Calls.Load())
	// One round trip each; waiting for another write would make it two.
	assert.Less(t, slowest, 4*oneWay, "a lone call took %v", slowest)
}

// Every call keeps its own deadline: behind a paused node, calls queued
// behind writes with a later deadline answer when their own deadline
// passes, with their context's error, not when the writes ahead of them
// give up.
func TestRedlockBatchCallsKeepTheirDeadline(t *testing.T) {
	srv := redistest.Start(t)
	b := script.NewBatch(batchClient(t, srv.Addr(), 10*time.Second), 10*time.Second)
	ctx := context.Background()
	require.NoError(t, echoScript.Load(ctx, b.Client).Err())
	srv.Pause()
	t.Cleanup(srv.Resume)

	const long, short = 3 * time.Second, 200 * time.Millisecond
	call := func(wg *sync.WaitGroup, timeout time.Duration, i int) {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			start := time.Now()
			err := echoScript.Run(cctx, b, nil, i).Err()
			took := time.Since(start)
			assert.True(t, errors.Is(script.RedisErr(err), lockstore.ErrUnavailable), "%v", err)
			// Scheduler noise under the race detector on a loaded machine
			// can reach ~200 ms; waiting for the writes ahead would take
			// the long deadline.
			assert.Less(t, took, timeout+time.Second, "call %d (deadline %v) answered after %v", i, timeout, took)
		})
	}
	var ahead, queued sync.WaitGroup
	for i := range script.BatchSenders {
		call(&ahead, long, i)
	}
	require.Eventually(t, func() bool {
		b.Mu.Lock()
		defer b.Mu.Unlock()
		return b.Senders == script.BatchSenders
	}, 5*time.Second, time.Millisecond)
	for i := range 20 {
		call(&queued, short, script.BatchSenders+i)
	}
	queued.Wait()
	ahead.Wait()
}

// A paused node delays no operation beyond NodeTimeout: its calls queue
// behind writes that never come back, but every other node has a batcher
// of its own, and each call stops waiting at its deadline.
func TestRedlockBatchPausedNodeDelaysOthersNoMore(t *testing.T) {
	const nodeTimeout = time.Second
	srvs := make([]*redistest.Server, 5)
	urls := make([]string, len(srvs))
	for i := range srvs {
		srvs[i] = redistest.Start(t)
		urls[i] = srvs[i].URL()
	}
	s, err := Open(urls, Options{NodeTimeout: nodeTimeout})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	require.Eventually(t, func() bool { return s.Ping(ctx) == nil }, 10*time.Second, 20*time.Millisecond)

	srvs[0].Pause()
	t.Cleanup(srvs[0].Resume)

	const clients, cycles = 16, 5
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range cycles {
				key := fmt.Sprintf("k%d-%d", c, i)
				start := time.Now()
				l, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
				took := time.Since(start)
				if !assert.NoError(t, err) {
					continue
				}
				// One fan-out waits up to NodeTimeout for the paused node; the
				// fence write-back, if any, goes only to nodes that answered.
				// The rest is slack for a loaded machine; a call that waited for
				// the writes queued ahead of it would take twice NodeTimeout.
				assert.Less(t, took, nodeTimeout+700*time.Millisecond, "acquire took %v", took)
				start = time.Now()
				assert.NoError(t, s.Release(ctx, key, l.Token))
				assert.Less(t, time.Since(start), nodeTimeout+700*time.Millisecond, "release took %v", time.Since(start))
			}
		})
	}
	wg.Wait()
	assert.True(t, s.nodes[0].isDown(), "the paused node was not marked down")
}

// A queued call waits for the round trip ahead of it only while that is
// short: a full queue goes out at once, and a call left queued for a fifth
// of NodeTimeout sends the queue itself. Either way it answers in about one
// round trip, not two.
func TestRedlockBatchQueueWaitIsBounded(t *testing.T) {
	const oneWay = 250 * time.Millisecond
	const rtt = 2 * oneWay
	for _, tc := range []struct {
		name        string
		nodeTimeout time.Duration // the batch's: NodeTimeout/5 is the longest wait
		queued      int
	}{
		{"full queue", 20 * time.Second, script.BatchMax},
		// Gives up waiting after 2 rtt/5, then one rtt: 7 rtt/5, well
		// inside its node timeout (2 rtt). With 5 rtt/4 (a wait of rtt/4,
		// then one rtt) the call needed all of its node timeout, and a
		// loaded machine's few milliseconds more made it an i/o timeout.
		{"waited long enough", 2 * rtt, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			proxy := redistest.NewProxy(t, srv.Addr(), oneWay)
			b := script.NewBatch(batchClient(t, proxy.Addr(), 10*time.Second), tc.nodeTimeout)
			ctx := context.Background()
			require.NoError(t, echoScript.Load(ctx, b.Client).Err())
			// Open the connections the senders will take, as the warm-up does:
			// a dial through the proxy would cost round trips of its own.
			var conns []*redis.Conn
			for range script.BatchSenders + 2 {
				c := b.Client.Conn()
				require.NoError(t, c.Ping(ctx).Err())
				conns = append(conns, c)
			}
			for _, c := range conns {
				require.NoError(t, c.Close())
			}
			// One call alone, on this machine now: a round trip and what the
			// load adds to it. The queued calls are judged against it, not a
			// fixed time: a loaded machine slows every call, not the queue.
			t0 := time.Now()
			require.NoError(t, echoScript.Run(ctx, b, nil, "alone").Err())
			alone := time.Since(t0)
			var ahead, queued sync.WaitGroup
			for i := range script.BatchSenders {
				ahead.Go(func() { assert.NoError(t, echoScript.Run(ctx, b, nil, i).Err()) })
			}
			require.Eventually(t, func() bool {
				b.Mu.Lock()
				defer b.Mu.Unlock()
				return b.Senders == script.BatchSenders
			}, 5*time.Second, time.Millisecond)
			start := time.Now()
			for i := range tc.queued {
				queued.Go(func() {
					want := fmt.Sprint(i)
					got, err := echoScript.Run(ctx, b, nil, want).Text()
					assert.NoError(t, err)
					assert.Equal(t, want, got)
					// A call alone takes `alone`; waiting at most 2 rtt/5 adds
					// that; waiting for a sender would take the rest of the
					// round trip ahead, then one more: about alone + 1 rtt.
					assert.Less(t, time.Since(start), alone+4*rtt/5, "call %d (alone: %v)", i, alone)
				})
			}
			queued.Wait()
			ahead.Wait()
		})
	}
}
