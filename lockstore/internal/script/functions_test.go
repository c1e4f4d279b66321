package script

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/redistest"
)

// TestFunctionRunIDIsTheProcesss: the library keeps the run id of the
// process it runs in (docs/safety.md, "The run id, read once per
// process"). A server restarted from an RDB file that carries the library
// and a key: a removal (uncount.lua's function) whose deadline names the
// run id sampled before the restart writes nothing and answers
// LOCKGW_CLOCK; one that names the new run id removes. The control keeps
// the run id where an RDB file carries it, in a key: the same check must
// find the old run id accepted.
func TestFunctionRunIDIsTheProcesss(t *testing.T) {
	t.Run("the library", func(t *testing.T) {
		oldAccepted := removesAfterRestart(t, Library.Text)
		assert.False(t, oldAccepted, "a call with the run id of the process before the restart removed the member")
	})
	t.Run("control: a run id kept in a key", func(t *testing.T) {
		kept := strings.Replace(Library.Text, `  if kept_run_id == nil then
    kept_run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  end
  return kept_run_id`, `  local v = redis.call('GET', 'control:run_id')
  if not v then
    v = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
    redis.call('SET', 'control:run_id', v)
  end
  return v`, 1)
		require.NotEqual(t, Library.Text, kept, "the control's replacement must apply")
		assert.True(t, removesAfterRestart(t, kept), "the control's kept run id survives the restart: the check must see it accepted")
	})
}

// removesAfterRestart loads text on a server, calls uncount's function
// once (the run id is kept), saves, restarts the server from its RDB, and
// reports whether a call naming the run id from before the restart
// removed a member. It checks the library came back with the RDB, and
// that a call naming the new run id removes.
func removesAfterRestart(t *testing.T, text string) (oldAccepted bool) {
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client()
	require.NoError(t, rdb.FunctionLoad(ctx, text).Err())
	uncount, ok := Library.Function(UncountScript.Hash())
	require.True(t, ok)
	deadline := func(run string) string {
		now, err := rdb.Time(ctx).Result()
		require.NoError(t, err)
		return run + ":" + strconv.FormatInt(now.Add(time.Minute).UnixMicro(), 10)
	}
	runID := func() string {
		info, err := rdb.Info(ctx, "server").Result()
		require.NoError(t, err)
		_, rest, _ := strings.Cut(info, "run_id:")
		return strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0])
	}
	fcall := func(member, run string) (any, error) {
		return rdb.FCall(ctx, uncount, []string{"set"}, member, deadline(run)).Result()
	}

	before := runID()
	require.NoError(t, rdb.ZAdd(ctx, "set", redis.Z{Member: "a"}, redis.Z{Member: "b"}, redis.Z{Member: "c"}).Err())
	removed, err := fcall("a", before)
	require.NoError(t, err)
	require.EqualValues(t, 1, removed, "before the restart, its own run id removes")

	require.NoError(t, rdb.Save(ctx).Err())
	srv.Kill()
	srv.Start() // the same --dir: it loads dump.rdb
	after := runID()
	require.NotEqual(t, before, after)
	libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: Library.Name}).Result()
	require.NoError(t, err)
	require.Len(t, libs, 1, "the library came back with the RDB")

	_, err = fcall("b", before)
	oldAccepted = err == nil
	if !oldAccepted {
		require.True(t, IsReply(err, ClockReply), "answered %v", err)
		score, err := rdb.ZScore(ctx, "set", "b").Result()
		require.NoError(t, err, "the refused call wrote nothing")
		require.Zero(t, score)
	}
	removed, err = fcall("c", after)
	if oldAccepted {
		// The control's kept run id is the old one: the new one is refused.
		require.True(t, IsReply(err, ClockReply), "answered %v", err)
		return oldAccepted
	}
	require.NoError(t, err)
	require.EqualValues(t, 1, removed, "after the restart, the new run id removes")
	return oldAccepted
}

// TestTransactionAfterAskingIsNotRewritten: a transaction's scripts go as
// they are, also when a Cluster puts ASKING in front of its MULTI (found
// by review: the hook looked only at the first command, and the Cluster
// reads EXEC's replies into the commands it was given, so the caller's
// reply was overwritten with the unread function call's).
func TestTransactionAfterAskingIsNotRewritten(t *testing.T) {
	ctx := context.Background()
	f := NewFunctions(nil)
	f.loaded.Store(true)
	var sha string
	for s := range Library.function {
		sha = s
		break
	}
	evalsha := redis.NewCmd(ctx, "evalsha", sha, 1, "k", "a")
	cmds := []redis.Cmder{redis.NewCmd(ctx, "asking"), redis.NewStatusCmd(ctx, "multi"), evalsha, redis.NewSliceCmd(ctx, "exec")}
	var wire []string
	hook := f.ProcessPipelineHook(func(ctx context.Context, sent []redis.Cmder) error {
		for _, c := range sent {
			wire = append(wire, c.Name())
		}
		evalsha.SetVal("reply")
		return nil
	})
	require.NoError(t, hook(ctx, cmds))
	assert.NotContains(t, wire, "fcall", "a transaction after -ASK sent a function")
	assert.Equal(t, "reply", evalsha.Val(), "the transaction's reply was overwritten")

	// Control: a plain pipeline's script does go as its function.
	wire = nil
	plain := redis.NewCmd(ctx, "evalsha", sha, 1, "k", "a")
	require.NoError(t, f.ProcessPipelineHook(func(ctx context.Context, sent []redis.Cmder) error {
		for _, c := range sent {
			wire = append(wire, c.Name())
		}
		return nil
	})(ctx, []redis.Cmder{plain}))
	assert.Contains(t, wire, "fcall")
}
