package script

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgateway/lockgateway/internal/aside"
)

// nodeBatch sends one Redlock node the scripts of concurrent operations
// together: what queues while a call to the node is on the wire goes out as
// one pipeline, one write and one read for all of it, instead of a pool
// checkout, a write and a read per script. Under load those syscalls are
// most of what a Redlock gateway spends (issue #17's profile).
//
// It changes when a script is sent, never what it does: each call is still
// one script, run atomically on its node; a pipeline only fixes the order of
// scripts that were concurrent anyway, and docs/safety.md assumes any order
// and any delay. Every call keeps its own deadline (the operation's
// NodeTimeout): its caller stops waiting then, as before, and a call whose
// deadline passed while it queued is not sent at all.
//
// A call never waits for a batch to form. With fewer than batchSenders
// pipelines to the node on the wire, it is sent at once, on the caller's
// goroutine, as a plain command: a lone request costs what it did before.
// Only calls arriving while batchSenders writes are on the wire queue; the
// first sender to finish takes the queue in one pipeline. A queued call
// therefore waits for the round trip ahead of its own, but never longer
// than a fifth of NodeTimeout, nor once batchMax calls are queued.
type Batch struct {
	Client  *redis.Client
	timeout time.Duration // NodeTimeout: bounds a pipeline whose calls have no deadline
	Trace   *CmdTracer    // nil with tracing off (trace.go)
	// Spawn starts the goroutine that sends what queued behind a sender:
	// aside.Go, whose workers' stacks have grown already, unless the
	// store's simulator sets goroutines of its own.
	Spawn func(func())

	// At most maxSenders writes on the wire before calls queue, and at most
	// maxBatch calls per pipeline: batchSenders and batchMax, but for
	// BenchmarkRedlockBatchCPU, which compares settings.
	MaxSenders, MaxBatch int

	Mu      sync.Mutex
	Queue   []*batchCall
	Senders int // calls or pipelines on the wire, at most maxSenders

	// For tests: how many writes (plain commands and pipelines) went out, and
	// how many calls they carried.
	Writes, Calls atomic.Int64
}

const (
	// batchSenders is how many writes to one node may be on the wire at
	// once before calls queue. Redis runs one script at a time, so more
	// connections in flight buy no more work on the node, only more
	// syscalls on the gateway; a second one lets a new call go out while a
	// batch is on the wire instead of always waiting for it. One sender
	// batches a little more, four noticeably less (BenchmarkRedlockBatchCPU).
	BatchSenders = 2
	// batchMax caps one pipeline, and a queue that reaches it goes out at
	// once, sent by the call that filled it: a burst leaves as many
	// pipelines side by side, not one round trip after another. Larger
	// batches saved no CPU measurably (BenchmarkRedlockBatchCPU).
	BatchMax = 16
	// A queued call waits at most NodeTimeout/maxWaitPart for a sender to
	// come back, then sends the queue itself: queueing never costs a call
	// more than that share of its time, however slow round trips get.
	maxWaitPart = 5
)

type batchCall struct {
	ctx   context.Context
	cmd   *redis.Cmd
	done  chan struct{} // closed once cmd holds the reply (or its error)
	taken bool          // out of the queue, in a batch (guarded by nodeBatch.mu)
}

var _ redis.Scripter = (*Batch)(nil)

func NewBatch(c *redis.Client, timeout time.Duration) *Batch {
	return &Batch{Client: c, timeout: timeout, MaxSenders: BatchSenders, MaxBatch: BatchMax, Spawn: aside.Go}
}

// EvalSha and Eval are what redis.Script.Run calls: EVALSHA, and EVAL when
// the node answers NOSCRIPT (a node restarted since the warm-up). Both are
// batched.
func (b *Batch) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return b.traced(ctx, evalArgs("evalsha", sha1, keys, args))
}

func (b *Batch) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return b.traced(ctx, evalArgs("eval", script, keys, args))
}

// The rest of redis.Scripter is not on any request's path.
func (b *Batch) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return b.Client.EvalRO(ctx, script, keys, args...)
}

func (b *Batch) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return b.Client.EvalShaRO(ctx, sha1, keys, args...)
}

func (b *Batch) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return b.Client.ScriptExists(ctx, hashes...)
}

func (b *Batch) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return b.Client.ScriptLoad(ctx, script)
}

// evalArgs is the command EVAL/EVALSHA payload numkeys key… arg…, built as
// go-redis builds it.
func evalArgs(name, payload string, keys []string, args []any) []any {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, payload, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return append(a, args...)
}

// do runs one command on the node and returns it with its reply, or with
// ctx's error once ctx ends first (the command may still run later, like any
// call that timed out).
func (b *Batch) do(ctx context.Context, args []any) *redis.Cmd {
	if side, ok := pairOf(ctx, args); ok {
		if cmd := b.paired(ctx, side, args); cmd != nil {
			return cmd
		}
	}
	cmd := redis.NewCmd(ctx, args...)
	b.Mu.Lock()
	if b.Senders < b.MaxSenders {
		b.Senders++
		b.Mu.Unlock()
		b.Writes.Add(1)
		b.Calls.Add(1)
		_ = b.Client.Process(ctx, cmd)
		b.handOff()
		return cmd
	}
	c := &batchCall{ctx: ctx, cmd: cmd, done: make(chan struct{})}
	b.Queue = append(b.Queue, c)
	if len(b.Queue) >= b.MaxBatch {
		// A full batch waits for no sender: the call that filled it sends
		// it, on a connection of its own, so that a burst goes out as
		// several pipelines at once rather than one round trip after
		// another.
		b.sendQueue() // unlocks b.mu; c was in it
		return cmd
	}
	b.Mu.Unlock()
	wait := time.NewTimer(b.timeout / maxWaitPart)
	defer wait.Stop()
	select {
	case <-c.done:
		return cmd
	case <-ctx.Done():
		return lateCmd(ctx, args)
	case <-wait.C:
	}
	// No sender came back within its share of NodeTimeout (round trips
	// are slow: the node or this process is short of CPU): send the queue
	// now rather than let the wait for a sender eat the rest.
	b.Mu.Lock()
	if !c.taken {
		b.sendQueue()
		return cmd
	}
	b.Mu.Unlock()
	select {
	case <-c.done:
		return cmd
	case <-ctx.Done():
		return lateCmd(ctx, args)
	}
}

// lateCmd is the answer of a call whose context ended first. Its own cmd may
// still be written to by the batch: the caller gets another.
func lateCmd(ctx context.Context, args []any) *redis.Cmd {
	late := redis.NewCmd(ctx, args...)
	late.SetErr(ctx.Err())
	return late
}

// sendQueue sends the whole queue as an extra sender, on the caller's
// goroutine, then gives the sender's place up as usual. b.mu is held on
// entry and released.
func (b *Batch) sendQueue() {
	batch := b.Queue
	b.Queue = nil
	for _, c := range batch {
		c.taken = true
	}
	b.Senders++
	b.Mu.Unlock()
	b.send(batch)
	b.handOff()
}

// handOff gives up a sender's place: to a goroutine that sends what queued
// meanwhile, when anything did, so the caller answers without waiting for
// other calls' batch.
func (b *Batch) handOff() {
	if batch := b.next(); batch != nil {
		b.Spawn(func() { b.sendAll(batch) })
	}
}

// next takes the queue's head, up to batchMax calls, keeping the sender's
// place; or, with nothing queued, gives the place up and returns nil.
func (b *Batch) next() []*batchCall {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	if len(b.Queue) == 0 {
		b.Senders--
		return nil
	}
	n := min(len(b.Queue), b.MaxBatch)
	batch := b.Queue[:n:n]
	b.Queue = b.Queue[n:]
	for _, c := range batch {
		c.taken = true
	}
	if len(b.Queue) == 0 {
		b.Queue = nil // let the backing array go
	}
	return batch
}

// sendAll sends batches until the queue is empty.
func (b *Batch) sendAll(batch []*batchCall) {
	for ; batch != nil; batch = b.next() {
		b.send(batch)
	}
}

// send writes the live calls of batch as one pipeline and hands each its
// reply. The pipeline runs until the latest of their deadlines (each at
// most NodeTimeout away): a caller whose deadline is earlier has stopped
// waiting by then, and cutting the read at the earliest would fail calls
// that still have time.
func (b *Batch) send(batch []*batchCall) {
	defer func() {
		for _, c := range batch {
			close(c.done)
		}
	}()
	pipe := b.Client.Pipeline()
	var deadline time.Time
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.cmd.SetErr(err) // its caller has given up: not sent
			continue
		}
		d, ok := c.ctx.Deadline()
		if !ok {
			d = time.Now().Add(b.timeout)
		}
		if d.After(deadline) {
			deadline = d
		}
		_ = pipe.Process(c.ctx, c.cmd)
	}
	n := pipe.Len()
	if n == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	b.Writes.Add(1)
	b.Calls.Add(int64(n))
	_, _ = pipe.Exec(ctx) // each command carries its own reply or error
}
