package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/luaredis"
	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rawGrants is c for the grant scripts of a test that runs them directly:
// with rule D's deadline (script/clock.go), as the stores send them.
func rawGrants(c redis.Scripter) script.Clocked {
	return script.Clocked{Scripter: c, Clocks: script.NewClocks(time.Second, false)}
}

// farDeadline is rule D's argument for a test that sends a grant script
// itself (in a MULTI or a pipeline): the run id of c's server, and a
// deadline an hour away (a minute was not enough for the memory test's
// 60 000 cycles under the race detector on a loaded machine).
func farDeadline(t testing.TB, c redis.Scripter) string {
	t.Helper()
	reply, err := script.ClockScript.Run(context.Background(), c, []string{"any"}).Slice()
	require.NoError(t, err)
	sec, _ := reply[1].(int64)
	return reply[0].(string) + ":" + strconv.FormatInt((sec+3600)*1_000_000, 10)
}

// The deadline is the sample's server time plus 99% of the time from the
// sample's arrival to the give-up moment: a lower bound of the server's
// clock at the give-up moment, whatever its rate within A3.
func TestClockDeadline(t *testing.T) {
	now := time.Unix(1000, 0)
	c := script.NewClocks(time.Second, false)
	c.Now = func() time.Time { return now }
	srv := c.Server("k")
	srv.S = script.ClockSample{Run: "abc", Us: 5_000_000, At: now.Add(-time.Second)}

	arg, giveUp, err := c.Deadline(context.Background(), nil, "k")
	require.NoError(t, err)
	assert.Equal(t, now.Add(time.Second), giveUp, "the call's timeout")
	assert.Equal(t, "abc:"+strconv.Itoa(5_000_000+int(0.99*2_000_000)), arg, "2 s from the sample to the give-up, at 99%")

	ctx, cancel := context.WithDeadline(context.Background(), now.Add(100*time.Millisecond))
	defer cancel()
	arg, giveUp, err = c.Deadline(ctx, nil, "k")
	require.NoError(t, err)
	assert.Equal(t, now.Add(100*time.Millisecond), giveUp, "an earlier request deadline")
	assert.Equal(t, "abc:"+strconv.Itoa(5_000_000+int(0.99*1_100_000)), arg)
}

// settle waits for the give-up moment only when the call may still land.
func TestClockSettle(t *testing.T) {
	now := time.Unix(1000, 0)
	giveUp := now.Add(time.Second)
	c := script.NewClocks(time.Second, false)
	c.Now = func() time.Time { return now }
	var slept time.Time
	c.SleepUntil = func(t time.Time) { slept = t }

	// A Redlock node's refusal (quarantined, another node list) is its
	// answer: a round that waited for its deadline took a whole node
	// timeout whenever a node was quarantined (TestRedlockRestartWhileContending).
	refused := fmt.Errorf("%w: x", &lockstore.RefusedError{Reason: "quarantine", Msg: "quarantined"})
	for _, err := range []error{nil, luaredis.Error(script.LateReply + " x"), redis.ErrPoolTimeout, &net.OpError{Op: "dial", Err: errors.New("refused")}, refused} {
		slept = time.Time{}
		c.Settle(err, giveUp)
		assert.True(t, slept.IsZero(), "%v cannot land later", err)
	}
	for _, err := range []error{context.DeadlineExceeded, &net.OpError{Op: "read", Err: errors.New("reset")}, errors.New("i/o timeout")} {
		slept = time.Time{}
		c.Settle(err, giveUp)
		assert.Equal(t, giveUp, slept, "%v may land later: wait for the deadline", err)
	}
}

// A grant sampled on one server and sent after that server restarted (a
// new run id) writes nothing there, and the gateway samples again and
// sends it once more.
func TestClockAfterRestart(t *testing.T) {
	srv := redistest.Start(t)
	s := openInternal(t, srv)
	ctx := context.Background()
	_, err := s.Acquire(ctx, "before", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)
	before := s.clocks.Server(script.LockKey("before")).S.Run
	require.NotEmpty(t, before)

	srv.Restart()
	require.Eventually(t, func() bool { return s.Ping(ctx) == nil }, 5*time.Second, 10*time.Millisecond)
	_, err = s.Acquire(ctx, "after", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
	require.NoError(t, err)
	after := s.clocks.Server(script.LockKey("after")).S.Run
	assert.NotEqual(t, before, after, "sampled again")
	info, err := srv.Client().Info(ctx, "errorstats").Result()
	require.NoError(t, err)
	assert.True(t, strings.Contains(info, "errorstat_LOCKGW_CLOCK:count=1"), "the grant reached the new server once with the old sample: %s", info)
}
