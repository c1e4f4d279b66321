// Package backendtest starts the Redis-based backends on test servers for
// the tests of several packages (lockstore, lockstore/redis,
// lockstore/redlock), which cannot share _test.go files: a Redis store, a
// Redis Cluster store, Redlock nodes, and leases planted straight into a
// node. Everything it starts is stopped or closed when the test ends.
//
// It imports the backends, so lockstore's own tests use it only from the
// external test package, lockstore_test: lockstore imports no backend.
package backendtest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	lockredis "github.com/lockgateway/lockgateway/lockstore/redis"
	"github.com/lockgateway/lockgateway/lockstore/redlock"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// StartNodes starts n redis-servers, each stopped when the test ends.
func StartNodes(t testing.TB, n int) []*redistest.Server {
	t.Helper()
	srvs := make([]*redistest.Server, n)
	for i := range srvs {
		srvs[i] = redistest.Start(t)
	}
	return srvs
}

// URLs are the servers' redis:// URLs.
func URLs(srvs []*redistest.Server) []string {
	urls := make([]string, len(srvs))
	for i, s := range srvs {
		urls[i] = s.URL()
	}
	return urls
}

// SmallPool is the pool of connections OpenRedlock's nodes get. Redlock's
// default is 128 a node, and its warm-up opens all but 16 of them before
// the node counts as warm, each with a handshake and the restart guard's
// INFO: 560 connections for every store of five nodes, and under the race
// detector most of the Redlock tests' CPU (make test on a 2-core machine
// ran out of time for it). The warm-up opens SmallPool-16 of these. A test
// about bursts or warm pools opens its store with redlock.Open, and gets
// the default.
const SmallPool = 32

// pooled is urls, each asking for SmallPool connections unless it names a
// pool size of its own.
func pooled(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		switch {
		case strings.Contains(u, "pool_size="):
			out[i] = u
		case strings.Contains(u, "?"):
			out[i] = u + "&pool_size=" + strconv.Itoa(SmallPool)
		default:
			out[i] = u + "?pool_size=" + strconv.Itoa(SmallPool)
		}
	}
	return out
}

// OpenRedlock opens a Redlock store on urls, its nodes' pools SmallPool
// connections each, closed when the test ends.
func OpenRedlock(t testing.TB, urls []string, opts redlock.Options) *redlock.Store {
	t.Helper()
	if opts.PreviousURLs != nil {
		opts.PreviousURLs = pooled(opts.PreviousURLs)
	}
	s, err := redlock.Open(pooled(urls), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Roomy is the node timeout of tests about votes rather than timeouts: the
// race detector on a loaded 2-core machine can delay a live node's answer
// past the 50ms default, and that would test something else.
const Roomy = 500 * time.Millisecond

// Ctx is a context for one test's calls: 10 s, cancelled when it ends.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// LockValue is a lock's stored value, as acquire.lua writes it.
func LockValue(token string, fence int64, owner string) string {
	return script.DigestHex(token) + ":" + strconv.FormatInt(fence, 10) + ":" + owner
}

// Plant writes a lease straight into one node, with fence 1 and the token's
// role as owner.
func Plant(t testing.TB, srv *redistest.Server, key, token string, ttl time.Duration) {
	t.Helper()
	require.NoError(t, srv.Client().Set(context.Background(), "lockgw:{"+key+"}:lock", LockValue(token, 1, "other"), ttl).Err())
}

// NewRedis is a Redis store on srv as the gateway opens one, closed when
// the test ends.
func NewRedis(t testing.TB, srv *redistest.Server) *lockredis.Store {
	t.Helper()
	return NewRedisTimeout(t, srv, time.Second)
}

// NewRedisTimeout is NewRedis with the client's timeouts at timeout: for
// a test of many calls at once whose subject is not how fast they are
// answered (under make test's load, a second was not always enough).
func NewRedisTimeout(t testing.TB, srv *redistest.Server, timeout time.Duration) *lockredis.Store {
	t.Helper()
	s := lockredis.New(redis.NewClient(&redis.Options{
		Addr:                  srv.Addr(),
		MaxRetries:            -1,
		DialTimeout:           timeout,
		ReadTimeout:           timeout,
		WriteTimeout:          timeout,
		ContextTimeoutEnabled: true,
	}))
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// NewCluster opens a store on the cluster as the gateway does
// (LOCKGW_REDIS_MODE=cluster), closed when the test ends.
func NewCluster(t testing.TB, c *redistest.Cluster) *lockredis.Store {
	t.Helper()
	s, err := lockredis.Open(c.URL(), lockredis.Options{Mode: lockredis.Cluster, Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// RequireNoErrors fails when a server answered any error since it started,
// naming each kind and count. NOSCRIPT is not a refusal: it is how
// go-redis's Script.Run learns that a script is not cached yet (EVALSHA
// first, then EVAL with the script's text), once per script and server,
// or a few times when first calls race; Redis answers it the same way.
func RequireNoErrors(t *testing.T, srvs ...*redistest.Server) {
	t.Helper()
	for _, srv := range srvs {
		stats, err := srv.ErrorStats(context.Background())
		require.NoError(t, err)
		if n := stats["NOSCRIPT"]; n > 0 {
			t.Logf("%s: %d NOSCRIPT (first runs of scripts, each followed by EVAL)", srv.Addr(), n)
			delete(stats, "NOSCRIPT")
		}
		assert.Empty(t, stats, "%s answered errors (INFO errorstats): a command of ours was refused", srv.Addr())
	}
}

// LogVersion logs the server's name and version.
func LogVersion(t *testing.T, srv *redistest.Server) {
	t.Helper()
	v, err := srv.Version(context.Background())
	require.NoError(t, err)
	t.Logf("%s at %s", v, srv.Addr())
}
