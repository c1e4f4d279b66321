package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/client"
	"github.com/lockgateway/lockgateway/internal/apitest"
)

// TestWatchCommand: lockctl watch prints the current state, then a line per
// change, and exits 0 when interrupted.
func TestWatchCommand(t *testing.T) {
	g := memoryGateway(t)
	key := apitest.Key(t)
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr apitest.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"--url", g.URL, "watch", key}, nil, &stdout, &stderr) }()
	lines := func(n int) []string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			ls := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			if len(ls) >= n && ls[0] != "" || time.Now().After(deadline) {
				return ls
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	require.Equal(t, []string{"released " + key}, lines(1))

	c := newClient(t, g.URL)
	lease, err := c.Acquire(ctx, key, client.AcquireOptions{TTL: time.Minute, Owner: "w1"})
	require.NoError(t, err)
	ls := lines(2)
	require.Len(t, ls, 2)
	assert.True(t, strings.HasPrefix(ls[1], "acquired "+key+" fence="), ls[1])
	assert.Contains(t, ls[1], `owner="w1"`)
	require.NoError(t, c.Release(ctx, key, lease.Token))
	ls = lines(3)
	require.Len(t, ls, 3)
	assert.True(t, strings.HasPrefix(ls[2], "released "+key+" fence="), ls[2])
	assert.NotContains(t, stdout.String(), lease.Token)

	cancel()
	select {
	case code := <-done:
		assert.Equal(t, exitOK, code, "stderr: %s", stderr.String())
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not end when interrupted")
	}
}
