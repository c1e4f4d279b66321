package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/backendtest"
	lockredis "github.com/lockgateway/lockgateway/lockstore/redis"
)

// cycles runs n grants and releases of one key through s.
func cycles(t *testing.T, s lockstore.Store, n int) {
	t.Helper()
	ctx := context.Background()
	for range n {
		l, err := s.Acquire(ctx, "functions/k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
		require.NoError(t, err)
		require.NoError(t, s.Release(ctx, "functions/k", l.Token))
	}
}

// TestGrantsAndReleasesCallTheLibrary: the scripts that carry rule D's
// deadline go as the library's functions (script/functions.go), which read
// the run id once per process: 100 cycles cost a handful of INFO, not one
// a script.
func TestGrantsAndReleasesCallTheLibrary(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	cycles(t, s, 1) // the clock sampled; the library's load starts aside
	require.Eventually(t, func() bool {
		libs, err := srv.Client().FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "lockgw_*"}).Result()
		return err == nil && len(libs) == 1
	}, 10*time.Second, 10*time.Millisecond, "the gateway loads its library")
	cycles(t, s, 1) // the first call that finds it loaded
	before, err := srv.CommandCalls(ctx)
	require.NoError(t, err)
	cycles(t, s, 100)
	after, err := srv.CommandCalls(ctx)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, after["fcall"]-before["fcall"], int64(200), "each grant and each release a function call")
	assert.LessOrEqual(t, after["info"]-before["info"], int64(3), "INFO: this test's own, and a clock sample at most")
}

// TestScriptsWhereFunctionsAreRefused: a server that refuses FUNCTION and
// FCALL (here an ACL; Redis 6 has neither), or FCALL alone, is sent the
// scripts, as before the library.
func TestScriptsWhereFunctionsAreRefused(t *testing.T) {
	for name, denied := range map[string][]any{
		"FUNCTION and FCALL": {"-function", "-fcall", "-fcall_ro"},
		"FCALL":              {"-fcall", "-fcall_ro"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			srv := redistest.Start(t)
			acl := append([]any{"ACL", "SETUSER", "gw", "on", ">secret", "~*", "&*", "+@all"}, denied...)
			require.NoError(t, srv.Client().Do(ctx, acl...).Err())
			s := lockredis.New(redis.NewClient(&redis.Options{
				Addr: srv.Addr(), Username: "gw", Password: "secret", MaxRetries: -1,
				ReadTimeout: time.Second, WriteTimeout: time.Second, ContextTimeoutEnabled: true,
			}))
			t.Cleanup(func() { _ = s.Close() })
			cycles(t, s, 20)
			calls, err := srv.CommandCalls(ctx)
			require.NoError(t, err)
			assert.Zero(t, calls["fcall"], "refused FCALLs are not counted as calls")
			assert.GreaterOrEqual(t, calls["evalsha"]+calls["eval"], int64(40), "each grant and each release a script")
		})
	}
}

// TestFailedLoadIsNotRetriedEveryCall: a server that lacks the library and
// refuses to load it (out of memory, as any write) is asked again at most
// once a second; meanwhile the calls go as scripts, and releases work
// (found by review: every call paid FUNCTION LIST and a refused FUNCTION
// LOAD first).
func TestFailedLoadIsNotRetriedEveryCall(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	s := backendtest.NewRedis(t, srv)
	const n = 6
	tokens := make([]string, n)
	for i := range n {
		l, err := s.Acquire(ctx, fmt.Sprintf("functions/%d", i), lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
		require.NoError(t, err)
		tokens[i] = l.Token
	}
	require.NoError(t, srv.Client().FunctionFlush(ctx).Err())
	srv.Fill("8mb")
	before, err := srv.CommandCalls(ctx)
	require.NoError(t, err)
	start := time.Now()
	for i := range n {
		require.NoError(t, s.Release(ctx, fmt.Sprintf("functions/%d", i), tokens[i]), "a release frees memory")
	}
	after, err := srv.CommandCalls(ctx)
	require.NoError(t, err)
	if time.Since(start) < time.Second {
		assert.LessOrEqual(t, after["function|list"]-before["function|list"], int64(1), "one load tried, not one a call")
	}
	assert.GreaterOrEqual(t, after["evalsha"]+after["eval"]-before["evalsha"]-before["eval"], int64(n), "the releases went as scripts")
}
