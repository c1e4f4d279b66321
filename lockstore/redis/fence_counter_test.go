package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/lockgateway/lockgateway/lockstore/internal/scripttest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReleasedKeysLeaveRedisMemoryFlat: 60 000 acquire/release cycles on
// fresh keys in a Redis of 8 MB that refuses writes past it (noeviction,
// as docs/safety.md advises for lock nodes). A released key keeps its fence
// counter for FenceMargin only, so the keys left at any moment are those
// of the last few margins' releases, no acquire is refused, and once the
// margin has passed nothing of them is left. Counters kept a day would be
// every cycle so far, which the key count checked every 2 000 cycles sees
// once the test has run three margins (3 s); 200 000 of them would fill
// the 8 MB and acquires fail. (60 000 cycles run 5 s at the rate below,
// and take the time a loaded machine needs for them, 25 s or more under
// the race detector: 200 000 took over a minute, for nothing more.)
//
// The cycles run the scripts Redis.Acquire and Release run, with the same
// arguments, in pipelines of 500 (one call at a time would take a minute
// under the race detector), at most 12 500 a second: the counters alive at
// any moment are those released in the last FenceMargin, about 3 MB at
// that rate.
func TestReleasedKeysLeaveRedisMemoryFlat(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "8mb").Err())
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, script.AcquireScript.Load(ctx, rdb).Err())
	require.NoError(t, script.ReleaseScript.Load(ctx, rdb).Err())
	require.NoError(t, script.InspectScript.Load(ctx, rdb).Err())
	base := redistest.UsedMemory(t, rdb)
	deadline := farDeadline(t, rdb) // rule D: the grants and deletes below go out as the store's do

	const cycles, batch, rate = 60_000, 500, 12_500
	// The most used memory from two margins in, when counters expire as
	// fast as they come, to half way; and in the second half.
	var early, late int64
	var released []time.Time // when each batch was released
	start := time.Now()
	next := start
	for first := 0; first < cycles; first += batch {
		time.Sleep(time.Until(next))
		// Never faster than rate: a batch that ran late is not caught up.
		if next = next.Add(batch * time.Second / rate); next.Before(time.Now()) {
			next = time.Now()
		}
		keys := make([]string, batch)
		digests := make([]string, batch)
		acquires := make([]*redis.Cmd, batch)
		pipe := rdb.Pipeline()
		for i := range batch {
			keys[i], digests[i] = fmt.Sprintf("fresh/%d", first+i), script.DigestHex(lockstore.NewToken())
			k, a := script.AcquireArgs{Digest: digests[i], Ttl: 30 * time.Second}.Call(keys[i])
			acquires[i] = pipe.EvalSha(ctx, script.AcquireScript.Hash(), k, append(a, deadline)...)
		}
		_, err := pipe.Exec(ctx)
		require.NoError(t, err, "acquires from cycle %d (used memory %d KiB)", first, redistest.UsedMemory(t, rdb)>>10)
		reads := make([]*redis.Cmd, batch)
		pipe = rdb.Pipeline()
		for i := range batch {
			require.Equal(t, int64(script.AcquireNew), acquires[i].Val().([]any)[0], "cycle %d granted", first+i)
			reads[i] = pipe.EvalSha(ctx, script.InspectScript.Hash(), []string{script.LockKey(keys[i])})
		}
		_, err = pipe.Exec(ctx)
		require.NoError(t, err, "reads from cycle %d", first)
		releases := make([]*redis.Cmd, batch)
		pipe = rdb.Pipeline()
		for i := range batch {
			read := reads[i].Val().([]any)
			v, err := script.ParseLockValue(read[0])
			require.NoError(t, err)
			v.Expiry = read[2].(int64)
			k, a := script.ReleaseCall(keys[i], digests[i], script.PublishAll, v, true)
			releases[i] = pipe.EvalSha(ctx, script.ReleaseScript.Hash(), k, append(a, deadline)...)
		}
		_, err = pipe.Exec(ctx)
		require.NoError(t, err, "releases from cycle %d", first)
		for i := range batch {
			require.Equal(t, int64(1), releases[i].Val(), "cycle %d released", first+i)
		}
		released = append(released, time.Now())
		// What is left is the counters of the releases of the last
		// FenceMargin, and those Redis has not reclaimed yet (an expired
		// key goes when its active expiry samples it, which lags under
		// this load): three margins' worth, judged against the cycles this
		// test really ran, not a memory figure that the rate a loaded
		// machine reaches moves. Counters that outlived their margin (kept
		// a day, as before) would be every cycle so far.
		if first%(4*batch) == 0 && first > 0 {
			n, err := rdb.DBSize(ctx).Result()
			require.NoError(t, err)
			recent := 0
			for _, at := range released {
				if time.Since(at) < 3*script.FenceMargin {
					recent += batch
				}
			}
			assert.LessOrEqual(t, n, int64(recent+batch), "after %d cycles: keys left by the releases of the last %v", first, 3*script.FenceMargin)
		}
		switch {
		case first == 2*rate:
			n, _ := rdb.DBSize(ctx).Result()
			t.Logf("after %d cycles: %d keys, used memory %d KiB (%d KiB before)", first, n, redistest.UsedMemory(t, rdb)>>10, base>>10)
			fallthrough
		case first > 2*rate && first < cycles/2 && first%(4*batch) == 0:
			early = max(early, redistest.UsedMemory(t, rdb))
		case first >= cycles/2 && first%(4*batch) == 0:
			late = max(late, redistest.UsedMemory(t, rdb))
		}
	}
	took := time.Since(start)
	t.Logf("%d cycles in %v (%.0f/s); used memory at most %d KiB in the first half, %d KiB in the second",
		cycles, took.Round(time.Millisecond), cycles/took.Seconds(), early>>10, late>>10)
	// The memory figures are logged, not judged: the keys above are what
	// grows if counters outlive their margin.

	require.Eventually(t, func() bool {
		n, err := rdb.DBSize(ctx).Result()
		return err == nil && n == 0
	}, script.FenceMargin+2*time.Second, 20*time.Millisecond, "a released key leaves nothing after the fence margin")
	t.Logf("used memory %d KiB once the margin has passed", redistest.UsedMemory(t, rdb)>>10)
}

// TestFenceCounterLifetime: a released key's counter goes FenceMargin
// after the release, and fences still increase once it has gone. A fence
// ahead of Redis's clock (a Redlock seed from a gateway whose clock is
// ahead) keeps its counter until the clock has passed it, so the next
// clock-seeded fence is still higher.
func TestFenceCounterLifetime(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	grant := func(key string, seed int64) (digest string, fence int64) {
		t.Helper()
		digest = script.DigestHex(lockstore.NewToken())
		r, err := script.Acquire(ctx, rawGrants(rdb), key, script.AcquireArgs{Digest: digest, Ttl: time.Minute, Seed: seed})
		require.NoError(t, err)
		require.Equal(t, script.AcquireNew, r.Code)
		return digest, r.Value.Fence
	}

	digest, first := grant("k", 0)
	pttl, err := rdb.PTTL(ctx, script.FenceKey("k")).Result()
	require.NoError(t, err)
	assert.InDelta(t, time.Minute+script.FenceMargin, pttl, float64(100*time.Millisecond), "the counter outlives the lease by the margin")
	require.NoError(t, releaseAsRead(ctx, rdb, "k", digest))
	pttl, err = rdb.PTTL(ctx, script.FenceKey("k")).Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, pttl, script.FenceMargin, "released: the counter has the margin left")
	require.Eventually(t, func() bool { return rdb.Exists(ctx, script.FenceKey("k")).Val() == 0 }, 2*script.FenceMargin, 10*time.Millisecond)
	_, second := grant("k", 0)
	assert.Greater(t, second, first, "a fence after the counter went")

	now, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	ahead := now.Add(3 * time.Second).UnixMicro()
	digest, fence := grant("ahead", ahead)
	require.Equal(t, ahead, fence)
	require.NoError(t, releaseAsRead(ctx, rdb, "ahead", digest))
	time.Sleep(script.FenceMargin + 100*time.Millisecond)
	_, next := grant("ahead", 0)
	assert.Greater(t, next, fence, "the counter lived until Redis's clock passed the fence")
}

// releaseAsRead reads digest's lease and releases it as read, as Release
// does.
func releaseAsRead(ctx context.Context, rdb *redis.Client, key, digest string) error {
	v, _, err := script.Inspect(ctx, rdb, key)
	if err != nil {
		return err
	}
	return script.Release(ctx, scripttest.Clocked(rdb), key, digest, v, true)
}
