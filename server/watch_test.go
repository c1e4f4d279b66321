package server_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
)

// watchPair runs fn with two gateways on one backend: memory (one gateway
// twice: its state is its own), Redis, and Redlock; the change is made
// through a, watched through b.
func watchPair(t *testing.T, fn func(t *testing.T, a, b *apitest.Gateway)) {
	parallelWhenShort(t)
	env := map[string]string{"LOCKGW_MAX_WAIT": "10s"}
	with := func(more map[string]string) map[string]string {
		e := map[string]string{}
		for k, v := range env {
			e[k] = v
		}
		for k, v := range more {
			e[k] = v
		}
		return e
	}
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		g := apitest.Start(t, env)
		fn(t, g, g)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		e := with(map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_URL": srv.URL()})
		fn(t, apitest.Start(t, e), apitest.Start(t, e))
	})
	t.Run("redlock", func(t *testing.T) {
		t.Parallel()
		_, re := redlockEnv(t, 3)
		e := with(re)
		fn(t, apitest.Start(t, e), apitest.Start(t, e))
	})
}

// longPoll sends a long-poll GET for path, waiting up to secs for the state
// to differ from etag; it returns the response and how long it took.
func longPoll(t *testing.T, c *apitest.Client, path, etag string, secs int) (*apitest.Response, time.Time) {
	t.Helper()
	r := c.Do(t, "GET", path, nil, "If-None-Match", etag, "Prefer", fmt.Sprintf("wait=%d", secs))
	return r, time.Now()
}

// startPoll starts a long-poll through c of path, against tag, for up to
// 8 s, and returns once it is waiting; its answer comes on the channel.
func startPoll(t *testing.T, c *apitest.Client, path, tag string) chan *apitest.Response {
	done := make(chan *apitest.Response, 1)
	go func() {
		r, _ := longPoll(t, c, path, tag, 8)
		done <- r
	}()
	time.Sleep(300 * time.Millisecond) // the poll is waiting
	return done
}

// pollWoke requires the long-poll done to answer, and asserts it did
// within a second of since, when what happened.
func pollWoke(t *testing.T, done chan *apitest.Response, since time.Time, what string) *apitest.Response {
	t.Helper()
	select {
	case r := <-done:
		took := time.Since(since)
		t.Logf("%s seen %v after", what, took)
		assert.Less(t, took, time.Second, "%s seen within a second", what)
		return r
	case <-time.After(8 * time.Second):
		t.Fatalf("%s: the long-poll did not wake", what)
		return nil
	}
}

// eventsOf returns next, which reads the next event of a stream: it must
// be name and, as asserted, have come within a second of since.
func eventsOf(t *testing.T, events *apitest.Events) func(name string, since time.Time) apitest.Event {
	return func(name string, since time.Time) apitest.Event {
		t.Helper()
		select {
		case e, ok := <-events.C:
			require.True(t, ok, "the stream ended")
			require.Equal(t, name, e.Name, "event %+v", e)
			took := e.At.Sub(since)
			assert.Less(t, took, time.Second, "%s seen within a second (%v)", name, took)
			return e
		case <-time.After(8 * time.Second):
			t.Fatalf("no %s event", name)
			return apitest.Event{}
		}
	}
}

// TestWatchETag: GET names the state in a weak ETag, never the token;
// If-None-Match with that tag is a 304 at once, and a long-poll that sees
// no change is a 304 when its wait runs out.
func TestWatchETag(t *testing.T) {
	watchPair(t, func(t *testing.T, a, b *apitest.Gateway) {
		ca, cb := apitest.NewClient(a.URL), apitest.NewClient(b.URL)
		path := lockPath(apitest.Key(t))

		r := cb.Do(t, "GET", path, nil)
		require.Equal(t, http.StatusNotFound, r.Status)
		assert.Equal(t, `W/"free"`, r.Header.Get("ETag"))

		r = ca.Do(t, "PUT", path, []byte(`{"ttl_ms":30000,"owner":"w1"}`), apitest.JSON...)
		require.Equal(t, http.StatusCreated, r.Status)
		token := r.JSON(t)["token"].(string)
		fence := int64(r.JSON(t)["fence"].(float64))
		tag := fmt.Sprintf(`W/"fence-%d"`, fence)

		r = cb.Do(t, "GET", path, nil)
		require.Equal(t, http.StatusOK, r.Status)
		assert.Equal(t, tag, r.Header.Get("ETag"))
		assert.NotContains(t, r.Header.Get("ETag"), token)

		// Conditional, no wait: 304 at once; another tag: the lock.
		r = cb.Do(t, "GET", path, nil, "If-None-Match", tag)
		require.Equal(t, http.StatusNotModified, r.Status)
		assert.Equal(t, tag, r.Header.Get("ETag"))
		assert.Empty(t, r.Body)
		r = cb.Do(t, "GET", path, nil, "If-None-Match", `W/"free"`)
		require.Equal(t, http.StatusOK, r.Status)
		r = cb.Do(t, "GET", path, nil, "If-None-Match", `nonsense`)
		require.Equal(t, http.StatusBadRequest, r.Status)

		// An extend keeps the tag: the holder is the same.
		r = ca.Do(t, "PATCH", path, []byte(`{"ttl_ms":40000}`), "Content-Type", "application/json", "Lock-Token", token)
		require.Equal(t, http.StatusOK, r.Status)
		r = cb.Do(t, "GET", path, nil, "If-None-Match", tag)
		require.Equal(t, http.StatusNotModified, r.Status)

		// Nothing changes: 304 when the wait runs out.
		start := time.Now()
		r, end := longPoll(t, cb, path, tag, 1)
		require.Equal(t, http.StatusNotModified, r.Status, "%s", r.Body)
		assert.Equal(t, "wait=1", r.Header.Get("Preference-Applied"))
		assert.Equal(t, tag, r.Header.Get("ETag"))
		assert.GreaterOrEqual(t, end.Sub(start), time.Second)
		assert.Less(t, end.Sub(start), 3*time.Second)

		// A stale tag answers at once.
		start = time.Now()
		r, end = longPoll(t, cb, path, `W/"free"`, 5)
		require.Equal(t, http.StatusOK, r.Status)
		assert.Equal(t, tag, r.Header.Get("ETag"))
		assert.Less(t, end.Sub(start), time.Second)
	})
}

// TestLongPollWakes: a long-poll on one gateway wakes within a second of
// a grant, a release, and an expiry made through (or on) another.
func TestLongPollWakes(t *testing.T) {
	watchPair(t, func(t *testing.T, a, b *apitest.Gateway) {
		ca, cb := apitest.NewClient(a.URL), apitest.NewClient(b.URL)
		path := lockPath(apitest.Key(t))

		// A grant.
		done := startPoll(t, cb, path, `W/"free"`)
		at := time.Now()
		r := ca.Do(t, "PUT", path, []byte(`{"ttl_ms":30000}`), apitest.JSON...)
		require.Equal(t, http.StatusCreated, r.Status)
		token := r.JSON(t)["token"].(string)
		fence := int64(r.JSON(t)["fence"].(float64))
		r = pollWoke(t, done, at, "grant")
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		assert.Equal(t, fmt.Sprintf(`W/"fence-%d"`, fence), r.Header.Get("ETag"))
		assert.EqualValues(t, fence, r.JSON(t)["fence"])
		tag := r.Header.Get("ETag")

		// A release.
		done = startPoll(t, cb, path, tag)
		at = time.Now()
		require.Equal(t, http.StatusNoContent, ca.Do(t, "DELETE", path, nil, "Lock-Token", token).Status)
		r = pollWoke(t, done, at, "release")
		require.Equal(t, http.StatusNotFound, r.Status)
		assert.Equal(t, `W/"free"`, r.Header.Get("ETag"))
		assert.Equal(t, "lock-not-found", r.ProblemType(t))

		// An expiry nobody announces.
		r = ca.Do(t, "PUT", path, []byte(`{"ttl_ms":1500}`), apitest.JSON...)
		require.Equal(t, http.StatusCreated, r.Status)
		expires, err := time.Parse(time.RFC3339Nano, r.JSON(t)["expires_at"].(string))
		require.NoError(t, err)
		done = startPoll(t, cb, path, fmt.Sprintf(`W/"fence-%d"`, int64(r.JSON(t)["fence"].(float64))))
		r = pollWoke(t, done, expires, "expiry")
		require.Equal(t, http.StatusNotFound, r.Status)
	})
}

// TestWatchStream: the event stream on one gateway reports, in order and
// with increasing ids, a grant, an extend, a release, another grant and
// its expiry, all made through another; a reconnect with Last-Event-ID
// skips what the client has seen.
func TestWatchStream(t *testing.T) {
	watchPair(t, func(t *testing.T, a, b *apitest.Gateway) {
		ca, cb := apitest.NewClient(a.URL), apitest.NewClient(b.URL)
		key := apitest.Key(t)
		path := lockPath(key)

		events, resp := cb.Stream(t, path)
		require.Nil(t, resp)
		defer events.Close()
		next := eventsOf(t, events)
		e := next("released", time.Now())
		assert.Equal(t, "0", e.ID, "free, holder unknown")
		assert.Equal(t, map[string]any{"key": key}, e.Data)

		at := time.Now()
		r := ca.Do(t, "PUT", path, []byte(`{"ttl_ms":30000,"owner":"w1"}`), apitest.JSON...)
		require.Equal(t, http.StatusCreated, r.Status)
		token := r.JSON(t)["token"].(string)
		fence := r.JSON(t)["fence"].(float64)
		acq := next("acquired", at)
		assert.Equal(t, fence, acq.Data["fence"])
		assert.Equal(t, "w1", acq.Data["owner"])
		assert.NotContains(t, acq.Data, "token")

		at = time.Now()
		r = ca.Do(t, "PATCH", path, []byte(`{"ttl_ms":60000}`), "Content-Type", "application/json", "Lock-Token", token)
		require.Equal(t, http.StatusOK, r.Status)
		ext := next("extended", at)
		assert.Equal(t, fence, ext.Data["fence"])
		assert.Greater(t, ext.Data["ttl_ms"], 30000.0)

		at = time.Now()
		require.Equal(t, http.StatusNoContent, ca.Do(t, "DELETE", path, nil, "Lock-Token", token).Status)
		rel := next("released", at)
		assert.Equal(t, fence, rel.Data["fence"])

		at = time.Now()
		r = ca.Do(t, "PUT", path, []byte(`{"ttl_ms":1500}`), apitest.JSON...)
		require.Equal(t, http.StatusCreated, r.Status)
		fence2 := r.JSON(t)["fence"].(float64)
		expires, err := time.Parse(time.RFC3339Nano, r.JSON(t)["expires_at"].(string))
		require.NoError(t, err)
		acq2 := next("acquired", at)
		assert.Equal(t, fence2, acq2.Data["fence"])
		exp := next("expired", expires)
		assert.Equal(t, fence2, exp.Data["fence"])

		// Ids increase.
		var last uint64
		for _, e := range []apitest.Event{acq, ext, rel, acq2, exp} {
			id, err := strconv.ParseUint(e.ID, 10, 64)
			require.NoError(t, err, "id %q", e.ID)
			assert.Greater(t, id, last, "%s's id", e.Name)
			last = id
		}
		events.Close()
		// Reconnect, to the other gateway, having seen the grant: the
		// current state comes as the event that takes the client there,
		// here the expiry it missed.
		re, resp := ca.Stream(t, path, "Last-Event-ID", acq2.ID)
		require.Nil(t, resp)
		defer re.Close()
		select {
		case e := <-re.C:
			assert.Equal(t, "released", e.Name, "the end of the grant it saw (the gateway cannot tell an expiry it did not watch)")
			assert.Equal(t, fence2, e.Data["fence"])
			assert.Equal(t, exp.ID, e.ID)
		case <-time.After(5 * time.Second):
			t.Fatal("no event after a reconnect")
		}
		re.Close()
		// Having seen the end: nothing until something changes.
		quiet, resp := cb.Stream(t, path, "Last-Event-ID", exp.ID)
		require.Nil(t, resp)
		defer quiet.Close()
		select {
		case e := <-quiet.C:
			t.Fatalf("a client that saw the end got %+v", e)
		case <-time.After(700 * time.Millisecond):
		}
	})
}

// TestWatchersShareOneReader: 1 000 streams and 200 long-polls on one key
// of one gateway cost Redis what one watcher does: one subscription, and a
// read per change (plus the safety poll), not one per watcher.
func TestWatchersShareOneReader(t *testing.T) {
	srv := redistest.Start(t)
	env := map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_URL": srv.URL(), "LOCKGW_MAX_CONNS": "3000", "LOCKGW_MAX_WAIT": "30s"}
	a, b := apitest.Start(t, env), apitest.Start(t, env)
	ca, cb := apitest.NewClient(a.URL), apitest.NewClient(b.URL)
	path := lockPath(apitest.Key(t))
	ctx := context.Background()

	const streams, polls = 1000, 200
	var m0 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	all := make([]*apitest.Events, streams)
	var wg sync.WaitGroup
	// At most `opening` streams ask for their opening state at once: what is
	// judged is the streams once open, not how a burst of 1000 first reads
	// fares (on a loaded machine some ran past the backend timeout: 503,
	// retry later, as the gateway should answer).
	const opening = 64
	slots := make(chan struct{}, opening)
	for i := range streams {
		wg.Go(func() {
			slots <- struct{}{}
			ev, resp := cb.Stream(t, path)
			<-slots
			if resp != nil {
				t.Errorf("stream %d: %d %s", i, resp.Status, resp.Body)
				return
			}
			all[i] = ev
			<-ev.C // the opening state
		})
	}
	wg.Wait()
	defer func() {
		for _, ev := range all {
			if ev != nil {
				ev.Close()
			}
		}
	}()
	var m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m1)
	t.Logf("%d streams open: %d goroutines and %d KiB of heap more, client and gateway sides together (this test runs both): %.1f goroutines and %.1f KiB a stream",
		streams, runtime.NumGoroutine()-g0, (int64(m1.HeapInuse)-int64(m0.HeapInuse))>>10,
		float64(runtime.NumGoroutine()-g0)/streams, float64(int64(m1.HeapInuse)-int64(m0.HeapInuse))/1024/streams)
	pollDone := make(chan *apitest.Response, polls)
	for range polls {
		go func() {
			r, _ := longPoll(t, cb, path, `W/"free"`, 20)
			pollDone <- r
		}()
	}
	time.Sleep(time.Second)

	subs, err := srv.Client().PubSubNumSub(ctx, "lockgw:{"+strings.TrimPrefix(path, "/locks/")+"}:released").Result()
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"lockgw:{" + strings.TrimPrefix(path, "/locks/") + "}:released": 1}, subs,
		"one subscription for %d watchers", streams+polls)

	before, err := srv.CommandCalls(ctx)
	require.NoError(t, err)
	r := ca.Do(t, "PUT", path, []byte(`{"ttl_ms":30000}`), apitest.JSON...)
	require.Equal(t, http.StatusCreated, r.Status)
	token := r.JSON(t)["token"].(string)
	fence := r.JSON(t)["fence"].(float64)
	for range polls {
		select {
		case r := <-pollDone:
			require.NotNil(t, r, "a long-poll failed (its error is above)")
			require.Equal(t, http.StatusOK, r.Status)
		case <-time.After(10 * time.Second):
			t.Fatal("a long-poll did not wake")
		}
	}
	for i, ev := range all {
		select {
		case e := <-ev.C:
			require.Equal(t, "acquired", e.Name)
			require.Equal(t, fence, e.Data["fence"])
		case <-time.After(10 * time.Second):
			t.Fatalf("stream %d got no acquired", i)
		}
	}
	require.Equal(t, http.StatusNoContent, ca.Do(t, "DELETE", path, nil, "Lock-Token", token).Status)
	for i, ev := range all {
		select {
		case e := <-ev.C:
			require.Equal(t, "released", e.Name)
		case <-time.After(10 * time.Second):
			t.Fatalf("stream %d got no released", i)
		}
	}
	after, err := srv.CommandCalls(ctx)
	require.NoError(t, err)

	delta := func(name string) int64 { return after[name] - before[name] }
	var total int64
	var lines []string
	for name, n := range after {
		if d := n - before[name]; d > 0 && name != "info" {
			total += d
			lines = append(lines, fmt.Sprintf("%s=%d", name, d))
		}
	}
	t.Logf("Redis commands while %d streams and %d long-polls watched a grant and a release: %d (%s)", streams, polls, total, strings.Join(lines, " "))
	// (commandstats counts the commands scripts run too.) The grant and
	// the release are one script each; the watchers' hub reads the key
	// (one script) once per signal and by its safety poll (every 2 s): a
	// handful of scripts in all, where one read per watcher would be more
	// than a thousand.
	scripts := delta("evalsha") + delta("eval")
	t.Logf("scripts run: %d (2 are the grant and the release)", scripts)
	assert.Less(t, scripts, int64(12), "no per-watcher Redis traffic")
	assert.Less(t, total, int64(100))
	assert.Zero(t, delta("subscribe"), "the key's one subscription was made before")
}

// TestWatchCluster: on a Redis Cluster (sharded pub/sub) a long-poll and a
// stream on one gateway see changes made through another within a second,
// an expiry included.
func TestWatchCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	env := map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_MODE": "cluster", "LOCKGW_REDIS_URL": c.URL(), "LOCKGW_MAX_WAIT": "10s"}
	a, b := apitest.Start(t, env), apitest.Start(t, env)
	ca, cb := apitest.NewClient(a.URL), apitest.NewClient(b.URL)
	for _, key := range []string{apitest.Key(t) + "/x", apitest.Key(t) + "/y"} { // two slots, likely two shards
		path := lockPath(key)
		events, resp := cb.Stream(t, path)
		require.Nil(t, resp)
		defer events.Close()
		next := eventsOf(t, events)
		next("released", time.Now())

		polled := startPoll(t, cb, path, `W/"free"`)
		at := time.Now()
		r := ca.Do(t, "PUT", path, []byte(`{"ttl_ms":1000}`), apitest.JSON...)
		require.Equal(t, http.StatusCreated, r.Status)
		token := r.JSON(t)["token"].(string)
		fence := r.JSON(t)["fence"].(float64)
		require.Equal(t, http.StatusOK, pollWoke(t, polled, at, "grant").Status)
		assert.Equal(t, fence, next("acquired", at).Data["fence"])
		at = time.Now()
		r = ca.Do(t, "PATCH", path, []byte(`{"ttl_ms":1500}`), "Content-Type", "application/json", "Lock-Token", token)
		require.Equal(t, http.StatusOK, r.Status)
		expires, err := time.Parse(time.RFC3339Nano, r.JSON(t)["expires_at"].(string))
		require.NoError(t, err)
		next("extended", at)
		assert.Equal(t, fence, next("expired", expires).Data["fence"])
	}
}

// TestWatchEndsOnShutdown: open streams and long-polls end when the
// gateway shuts down; they do not hold the drain.
func TestWatchEndsOnShutdown(t *testing.T) {
	g := apitest.Start(t, map[string]string{"LOCKGW_MAX_WAIT": "60s"})
	c := apitest.NewClient(g.URL)
	path := lockPath(apitest.Key(t))
	events, resp := c.Stream(t, path)
	require.Nil(t, resp)
	defer events.Close()
	<-events.C
	polled := make(chan error, 1)
	go func() {
		_, err := c.Try(t, "GET", path, nil, "If-None-Match", `W/"free"`, "Prefer", "wait=60")
		polled <- err
	}()
	time.Sleep(200 * time.Millisecond)
	m := string(c.Do(t, "GET", "/metrics", nil).Body)
	assert.Contains(t, m, "\nlockgw_watched_keys 1\n")
	assert.Contains(t, m, "\nlockgw_watchers 2\n", "the stream and the long-poll")
	start := time.Now()
	require.NoError(t, g.Stop())
	assert.Less(t, time.Since(start), 5*time.Second)
	select {
	case _, ok := <-events.C:
		assert.False(t, ok, "the stream ended")
	case <-time.After(5 * time.Second):
		t.Fatal("the stream outlived the gateway")
	}
	select {
	case <-polled:
	case <-time.After(5 * time.Second):
		t.Fatal("the long-poll outlived the gateway")
	}
}

// TestWatchSentinelFailover: a stream on Sentinel keeps reporting changes
// made through another gateway after the master failed over (its
// subscription follows the new master; the safety poll covers what was
// published meanwhile).
func TestWatchSentinelFailover(t *testing.T) {
	st := redistest.StartSentinel(t)
	env := map[string]string{
		"LOCKGW_BACKEND":         "redis",
		"LOCKGW_REDIS_MODE":      "sentinel",
		"LOCKGW_REDIS_URL":       st.URL(),
		"LOCKGW_BACKEND_TIMEOUT": "500ms",
	}
	ca, cb := apitest.NewClient(apitest.Start(t, env).URL), apitest.NewClient(apitest.Start(t, env).URL)
	path := lockPath(apitest.Key(t))
	events, resp := cb.Stream(t, path)
	require.Nil(t, resp)
	defer events.Close()
	next := func(name string, within time.Duration) apitest.Event {
		t.Helper()
		since := time.Now()
		select {
		case e := <-events.C:
			require.Equal(t, name, e.Name, "%+v", e)
			t.Logf("%s after %v", name, time.Since(since))
			return e
		case <-time.After(within):
			t.Fatalf("no %s within %v", name, within)
			return apitest.Event{}
		}
	}
	next("released", 5*time.Second)
	r := ca.Do(t, "PUT", path, []byte(`{"ttl_ms":60000}`), apitest.JSON...)
	require.Equal(t, http.StatusCreated, r.Status)
	token := r.JSON(t)["token"].(string)
	next("acquired", time.Second)

	_, took := st.Failover()
	t.Logf("failover took %v", took)
	// The gateway that changes the lock serves again once it finds the
	// new master; the lease may or may not have reached the replica.
	var granted *apitest.Response
	require.Eventually(t, func() bool {
		r, err := ca.Try(t, "PUT", path+"-after", []byte(`{"ttl_ms":60000}`), apitest.JSON...)
		if err == nil && r.Status == http.StatusCreated {
			granted = r
			return true
		}
		return false
	}, 20*time.Second, 50*time.Millisecond)
	require.NotNil(t, granted)

	// Watch a change made now: it arrives within the safety poll at worst.
	path2 := path + "-after"
	events2, resp := cb.Stream(t, path2)
	require.Nil(t, resp)
	defer events2.Close()
	select {
	case e := <-events2.C:
		require.Equal(t, "acquired", e.Name)
	case <-time.After(5 * time.Second):
		t.Fatal("no opening state after the failover")
	}
	require.Equal(t, http.StatusNoContent, ca.Do(t, "DELETE", path2, nil, "Lock-Token", granted.JSON(t)["token"].(string)).Status)
	select {
	case e := <-events2.C:
		require.Equal(t, "released", e.Name)
	case <-time.After(3 * time.Second):
		t.Fatal("a release after the failover was not seen")
	}

	// And the stream opened before the failover follows the new master:
	// the first lock's state there (held if the lease was replicated, else
	// free) and then a release of it or a new grant.
	r = ca.Do(t, "GET", path, nil)
	if r.Status == http.StatusOK {
		t.Log("the lease survived the failover")
		require.Equal(t, http.StatusNoContent, ca.Do(t, "DELETE", path, nil, "Lock-Token", token).Status)
	} else {
		t.Log("the lease was lost in the failover")
	}
	next("released", 3*time.Second)
	r = ca.Do(t, "PUT", path, []byte(`{"ttl_ms":60000}`), apitest.JSON...)
	require.Equal(t, http.StatusCreated, r.Status)
	next("acquired", 3*time.Second)
}

// TestWatchBackendDown: with Redis gone, a long-poll and a stream answer
// 503 backend-unavailable (after the backend timeout), as a plain GET
// does, rather than waiting or streaming nothing.
func TestWatchBackendDown(t *testing.T) {
	srv := redistest.Start(t)
	g := apitest.Start(t, map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_URL": srv.URL(), "LOCKGW_BACKEND_TIMEOUT": "300ms"})
	c := apitest.NewClient(g.URL)
	path := lockPath(apitest.Key(t))
	srv.Kill()

	start := time.Now()
	r, _ := longPoll(t, c, path, `W/"free"`, 10)
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	assert.Equal(t, "backend-unavailable", r.ProblemType(t))
	assert.Less(t, time.Since(start), 3*time.Second)

	events, resp := c.Stream(t, path)
	require.Nil(t, events)
	require.Equal(t, http.StatusServiceUnavailable, resp.Status)
	assert.Equal(t, "backend-unavailable", resp.ProblemType(t))
}
