package server_test

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/server"
)

// TestSentinelFailover: two gateways on one Sentinel set-up, one answering
// at once, one waiting for a replica's acknowledgement
// (LOCKGW_REDIS_WAIT_REPLICAS=1). The master is killed while clients keep
// taking and releasing locks. The first gateway serves again once the
// sentinels promoted the replica (how long is logged: docs/redis-sentinel.md
// quotes it); on the second, a lease granted before the failover still
// holds after it: another client gets 409, its holder releases it, and
// the next grant's fence is higher.
func TestSentinelFailover(t *testing.T) {
	st := redistest.StartSentinel(t)
	env := map[string]string{
		"LOCKGW_BACKEND":         "redis",
		"LOCKGW_REDIS_MODE":      "sentinel",
		"LOCKGW_REDIS_URL":       st.URL(),
		"LOCKGW_BACKEND_TIMEOUT": "500ms",
	}
	fast := apitest.NewClient(apitest.Start(t, env).URL)
	env["LOCKGW_REDIS_WAIT_REPLICAS"] = "1"
	acked := apitest.NewClient(apitest.Start(t, env).URL)

	held := acked.Do(t, "PUT", "/locks/failover/held", []byte(`{"ttl_ms":60000}`), apitest.JSON...)
	require.Equal(t, http.StatusCreated, held.Status, "%s", held.Body)
	lease := held.JSON(t)
	token, fence := lease["token"].(string), lease["fence"].(float64)

	// Load: clients take and release locks on their own keys through the
	// gateway that does not wait, noting when each answer came.
	var (
		killedAt    atomic.Int64 // ns since start, 0 before the kill
		recoveredAt atomic.Int64
		unexpected  atomic.Int32
		served      atomic.Int32
		stop        = make(chan struct{})
		wg          sync.WaitGroup
	)
	start := time.Now()
	for i := range 8 {
		wg.Go(func() {
			path := "/locks/failover/load-" + string(rune('a'+i))
			for {
				select {
				case <-stop:
					return
				default:
				}
				sent := time.Since(start)
				r, err := fast.Try(t, "PUT", path, []byte(`{"ttl_ms":5000}`), apitest.JSON...)
				if err != nil {
					unexpected.Add(1)
					continue
				}
				switch r.Status {
				case http.StatusCreated:
					served.Add(1)
					// A request sent after the kill that got a lock: the
					// gateway serves again.
					if k := killedAt.Load(); k != 0 && sent > time.Duration(k) {
						recoveredAt.CompareAndSwap(0, int64(time.Since(start)))
					}
					_, _ = fast.Try(t, "DELETE", path, nil, "Lock-Token", r.JSON(t)["token"].(string))
				case http.StatusServiceUnavailable, http.StatusConflict:
					// 503 while there is no master; 409 when a release
					// answered 503 (outcome unknown) left the lock held.
					time.Sleep(5 * time.Millisecond)
				default:
					unexpected.Add(1)
				}
			}
		})
	}
	// The first grants take a few round trips; a busy CI machine once
	// served none in a fixed 300 ms, so wait for them, as for the recovery.
	require.Eventually(t, func() bool { return served.Load() > 0 }, 10*time.Second, 10*time.Millisecond,
		"the load is served before the failover")
	ready := fast.Do(t, "GET", "/readyz", nil)
	require.Equal(t, http.StatusOK, ready.Status, "%s", ready.Body)
	assert.Equal(t, "sentinel", ready.JSON(t)["mode"])
	assert.Equal(t, st.Master().Addr(), ready.JSON(t)["master"], "/readyz names the master")
	killed := st.KillMaster()
	killedAt.Store(int64(time.Since(start)))
	st.WaitFailover(killed)
	promoted := time.Since(start) - time.Duration(killedAt.Load())
	require.Eventually(t, func() bool { return recoveredAt.Load() != 0 }, 20*time.Second, 10*time.Millisecond,
		"the gateway serves again after the failover")
	close(stop)
	wg.Wait()
	// /readyz is one probe with a deadline, as a load balancer polls it: a
	// loaded run's one probe after the failover timed out (503) while the
	// gateway was granting locks. Ready again means it answers 200 soon.
	require.Eventually(t, func() bool {
		ready = fast.Do(t, "GET", "/readyz", nil)
		return ready.Status == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond, "ready again after the failover")
	assert.NotEqual(t, killed.Addr(), ready.JSON(t)["master"], "/readyz names the promoted master")
	assert.Equal(t, st.Master().Addr(), ready.JSON(t)["master"])
	serving := time.Duration(recoveredAt.Load() - killedAt.Load())
	t.Logf("master killed: the sentinels promoted the replica after %v; the gateway granted locks again %v after the kill",
		promoted.Round(time.Millisecond), serving.Round(time.Millisecond))
	assert.Zero(t, unexpected.Load(), "only 201, 409 and 503 answers, no transport errors")

	// The acknowledged lease survived on the promoted replica.
	r := acked.Do(t, "PUT", "/locks/failover/held", []byte(`{"ttl_ms":60000}`), apitest.JSON...)
	require.Equal(t, http.StatusConflict, r.Status, "another client is refused: %s", r.Body)
	r = acked.Do(t, "GET", "/locks/failover/held", nil)
	require.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, fence, r.JSON(t)["fence"])
	r = acked.Do(t, "DELETE", "/locks/failover/held", nil, "Lock-Token", token)
	require.Equal(t, http.StatusNoContent, r.Status, "its holder releases it: %s", r.Body)

	// The new master has no replica: nothing can be acknowledged, so a
	// grant is answered 503 and leaves nothing behind.
	r = acked.Do(t, "PUT", "/locks/failover/held", []byte(`{"ttl_ms":60000}`), apitest.JSON...)
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	assert.Equal(t, "backend-unavailable", r.ProblemType(t))
	assert.Contains(t, r.Problem(t)["detail"], "fewer Redis replicas acknowledged the write")
	assert.Equal(t, "1", r.Header.Get("Retry-After"))
	require.Equal(t, http.StatusNotFound, acked.Do(t, "GET", "/locks/failover/held", nil).Status, "no lease left behind")
	// Nor is the gateway ready: a load balancer should send its lock
	// traffic elsewhere (it said 200 while every acquire was refused).
	r = acked.Do(t, "GET", "/readyz", nil)
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	assert.Contains(t, r.Problem(t)["detail"], "fewer replicas acknowledge its writes than LOCKGW_REDIS_WAIT_REPLICAS")

	st.Rejoin(killed)
	r = acked.Do(t, "PUT", "/locks/failover/held", []byte(`{"ttl_ms":60000}`), apitest.JSON...)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	assert.Greater(t, r.JSON(t)["fence"].(float64), fence, "fences go on rising across the failover")
}

func TestRedisWaitReplicasConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"not a count", map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_WAIT_REPLICAS": "one"}, `LOCKGW_REDIS_WAIT_REPLICAS: "one" is not a replica count`},
		{"negative", map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_WAIT_REPLICAS": "-1"}, `"-1" is not a replica count`},
		{"another backend", map[string]string{"LOCKGW_REDIS_WAIT_REPLICAS": "1"}, "only the redis backend waits for replicas, and the backend is memory"},
		{"cluster", map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_MODE": "cluster", "LOCKGW_REDIS_WAIT_REPLICAS": "1"}, "not cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := server.Run(ctx, nil, func(k string) string { return tc.env[k] }, io.Discard, io.Discard)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
