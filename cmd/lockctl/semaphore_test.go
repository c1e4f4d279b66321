package main

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/client"
	"github.com/lockgateway/lockgateway/internal/apitest"
)

// TestRunUnderPermits: four `run -n 2` of one key run at most two at once
// (watched through GET /semaphores/KEY), all four run, each with its
// permit's fence in LOCK_FENCE; a run with another N is refused (75).
func TestRunUnderPermits(t *testing.T) {
	runsCommands(t)
	g := memoryGateway(t)
	c := newClient(t, g.URL)
	key := apitest.Key(t)

	// Another N while permits are held is refused.
	held, err := c.AcquirePermit(t.Context(), key, 2, client.AcquireOptions{})
	require.NoError(t, err)
	r := lockctl(t, g.URL, "run", "-n", "3", key, "--", "true")
	assert.Equal(t, exitNotAcquired, r.code, "another N while permits are held: %s", r.stderr)
	require.NoError(t, c.ReleasePermit(t.Context(), key, held.Token))

	var wg sync.WaitGroup
	results := make([]result, 4)
	for i := range results {
		wg.Go(func() {
			results[i] = lockctl(t, g.URL, "run", "-n", "2", "--wait", "20s", "--ttl", "2s", key, "--",
				"sh", "-c", `sleep 0.5; echo "$LOCK_FENCE"`)
		})
	}
	most := 0
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for watching := true; watching; {
		select {
		case <-done:
			watching = false
		case <-time.After(20 * time.Millisecond):
			if info, err := c.InspectSemaphore(t.Context(), key); err == nil {
				most = max(most, len(info.Holders))
				assert.Equal(t, 2, info.Limit)
			}
		}
	}
	assert.Equal(t, 2, most, "at most (and, here, exactly) two at once")
	fences := map[string]bool{}
	for _, r := range results {
		require.Equal(t, 0, r.code, r.stderr)
		assert.NotEmpty(t, r.stdout)
		fences[r.stdout] = true
	}
	assert.Len(t, fences, 4, "each run had its own permit")
}
