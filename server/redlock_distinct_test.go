package server_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/server"
)

// TestRedlockSameRedisTwiceRefused: one Redis listed under two names
// (127.0.0.1 and localhost) would vote twice; the gateway does not start,
// and says which entries are the same server.
func TestRedlockSameRedisTwiceRefused(t *testing.T) {
	nodes, env := redlockEnv(t, 3)
	env["LOCKGW_ADDR"] = "127.0.0.1:0"
	env["LOCKGW_REDLOCK_URLS"] = strings.Join([]string{
		nodes[0].URL(), strings.Replace(nodes[0].URL(), "127.0.0.1", "localhost", 1), nodes[1].URL(),
	}, ",")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := server.Run(ctx, nil, func(k string) string { return env[k] }, io.Discard, io.Discard)
	require.Error(t, err, "the gateway served with one Redis listed twice")
	assert.Contains(t, err.Error(), "--redlock-urls")
	assert.Contains(t, err.Error(), "nodes 1 (127.0.0.1:")
	assert.Contains(t, err.Error(), "2 (localhost:")
	assert.Contains(t, err.Error(), "are the same Redis server")
}
