package redlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

var (
	_ lockstore.BatchExtender    = (*Store)(nil)
	_ lockstore.BatchSemExtender = (*Store)(nil)
)

// extendCall is how E is sent for one kind of value, alone (Extend,
// SemExtend) or in a batch: send calls it on c (a node's guarded path, or
// a guard over a pipeline), read reads its answer, and writes is the
// node's guarded path for it.
type extendCall[V any] struct {
	send   func(ctx context.Context, c redis.Scripter, key, digest string, ttl time.Duration) *redis.Cmd
	read   func(*redis.Cmd) (V, error)
	writes func(n *redlockNode) script.Clocked
}

var (
	lockExtends = extendCall[script.LockValue]{
		send: func(ctx context.Context, c redis.Scripter, key, digest string, ttl time.Duration) *redis.Cmd {
			keys, args := script.ExtendArgs{Digest: digest, TTL: ttl, Longer: true}.Call(key)
			return script.ExtendScript.Run(ctx, c, keys, args...)
		},
		read:   script.ExtendRead,
		writes: func(n *redlockNode) script.Clocked { return n.writes },
	}
	semExtends = extendCall[script.SemValue]{
		send: func(ctx context.Context, c redis.Scripter, key, digest string, ttl time.Duration) *redis.Cmd {
			keys, args := script.SemExtendArgs(key, digest, ttl, true, script.PublishAll)
			return script.SemExtendScript.Run(ctx, c, keys, args...)
		},
		read:   script.SemExtendRead,
		writes: func(n *redlockNode) script.Clocked { return n.semWrites },
	}
)

// on is E of key on node n, alone, through its guarded path.
func (c extendCall[V]) on(ctx context.Context, n *redlockNode, key, digest string, ttl time.Duration) (V, error) {
	return c.read(c.send(ctx, c.writes(n), key, digest, ttl))
}

// ExtendBatch implements lockstore.BatchExtender: G3 for every lease of
// exts, with one pipeline per node (docs/safety.md, "G3 for many leases at
// once"), so that holds renewing together cost each node one round trip,
// and the gateway one fan-out, rather than one of each per hold.
func (r *Store) ExtendBatch(ctx context.Context, exts []lockstore.Extension) []lockstore.Extended {
	out := make([]lockstore.Extended, len(exts))
	extendBatch(ctx, r, lockValues, lockExtends, exts, func(i int, v script.LockValue, granted time.Duration, start time.Time, err error) {
		if err != nil {
			out[i].Err = err
			return
		}
		out[i].Lease = lockLease(exts[i].Key, exts[i].Token, v, granted, start)
	})
	return out
}

// SemExtendBatch implements lockstore.BatchSemExtender, as ExtendBatch
// does for leases.
func (r *Store) SemExtendBatch(ctx context.Context, exts []lockstore.Extension) []lockstore.SemExtended {
	out := make([]lockstore.SemExtended, len(exts))
	extendBatch(ctx, r, semValues, semExtends, exts, func(i int, v script.SemValue, granted time.Duration, start time.Time, err error) {
		if err != nil {
			out[i].Err = err
			return
		}
		out[i].Permit = semPermit(exts[i].Key, exts[i].Token, v, granted, start)
	})
	return out
}

// batchAnswer is one node's answer to one extension's E.
type batchAnswer[V any] struct {
	val V
	err error
}

// extendChunkMax is the most extensions one pipeline to a node carries. Each
// pipeline has one NodeTimeout, as a single call does, and a node runs its
// scripts one after another: holds that renew together (a slot's, and the
// retries of a batch that failed, which fall in one slot again) made
// batches of 400 to 800 leases that a node could not answer within 50 ms,
// so every lease of the batch failed together, again and again. Chunks go
// out at once, each judged on its own.
const extendChunkMax = 32

// extendBatch runs G3 for each of exts, extendChunkMax of them at a time, all
// chunks at once (extendChunk), and tells answer the outcome of each.
func extendBatch[V any](ctx context.Context, r *Store, k valueKind[V], c extendCall[V], exts []lockstore.Extension,
	answer func(i int, v V, granted time.Duration, start time.Time, err error),
) {
	var wg sync.WaitGroup
	for from := 0; from < len(exts); from += extendChunkMax {
		to := min(from+extendChunkMax, len(exts))
		chunk := func() {
			extendChunk(ctx, r, k, c, exts[from:to], func(i int, v V, granted time.Duration, start time.Time, err error) {
				answer(from+i, v, granted, start, err)
			})
		}
		if to == len(exts) { // the last on the caller's goroutine
			chunk()
			break
		}
		wg.Add(1)
		r.spawn(func() {
			defer wg.Done()
			chunk()
		})
	}
	wg.Wait()
}

// extendChunk runs G3 for each of exts at once: on every node, the E
// scripts of all of them in one pipeline; then each judged from its own
// answers (judgeExtend), its validity from the chunk's start.
func extendChunk[V any](ctx context.Context, r *Store, k valueKind[V], c extendCall[V], exts []lockstore.Extension,
	answer func(i int, v V, granted time.Duration, start time.Time, err error),
) {
	digests := make([]string, len(exts))
	sent := make([]int, 0, len(exts)) // the indices of exts sent
	for i, e := range exts {
		if err := lockstore.CheckExtend(e.Key, e.Token, e.TTL); err != nil {
			answer(i, *new(V), 0, time.Time{}, err)
			continue
		}
		digests[i] = script.DigestHex(e.Token)
		sent = append(sent, i)
	}
	if len(sent) == 0 {
		return
	}
	start := time.Now()
	nodes := fanOutWithin(ctx, r, r.renewalTimeout(ctx, exts), nil, func(ctx context.Context, i int, n *redlockNode) ([]batchAnswer[V], error) {
		return extendOnNode(ctx, r, c, i, n, exts, digests, sent)
	})
	votes := make([]nodeResult[V], len(nodes))
	for j, i := range sent {
		for ni, res := range nodes {
			a := batchAnswer[V]{err: res.err}
			if res.val != nil {
				a = res.val[j]
			}
			votes[ni] = nodeResult[V]{val: a.val, err: a.err, counted: res.counted}
			if quarantinedOnNode(a.err) {
				votes[ni] = nodeResult[V]{counted: false} // as fanOut counts it
			}
		}
		v, granted, err := judgeExtend(ctx, r, k, votes, exts[i].TTL, start)
		answer(i, v, granted, start, err)
	}
}

// renewalTimeout is how long a batch's pipelines may wait for their nodes:
// a tenth of the shortest lease's TTL, at least NodeTimeout and at most
// renewalWaitMax (docs/safety.md, "G3 for many leases at once": nothing in
// G3 bounds a delay, and the validity counts it). Renewals have time that
// an acquire does not: a hold renews a third of its TTL in. Under load,
// answers came a little past a NodeTimeout of 50 ms; each miss closed its
// connection (go-redis cannot tell a late reply from the next) and failed
// the renewal of every lease in the pipeline, and enough of them marked
// the node down for every request (observe). They go on the node's
// renewals client, whose reads wait that long.
//
// The wait ends a NodeTimeout before the caller's deadline: a node that
// does not answer (paused, not yet marked down) must fail its calls while
// the batch may still be judged on the others' answers. Waiting up to the
// deadline itself, the batch's context ended with that node's call, and
// every lease a majority had extended was answered 503 (review).
func (r *Store) renewalTimeout(ctx context.Context, exts []lockstore.Extension) time.Duration {
	shortest := time.Duration(0)
	for _, e := range exts {
		if ttl := e.TTL; ttl > 0 && (shortest == 0 || ttl < shortest) {
			shortest = ttl
		}
	}
	wait := min(shortest/10, renewalWaitMax)
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d)-r.nodeTimeout)
	}
	return max(r.nodeTimeout, wait)
}

// renewalWaitMax is the longest a batch of renewals waits for a node.
const renewalWaitMax = time.Second

// extendOnNode sends node n (index ni) the E scripts of exts[sent[j]] in
// one pipeline, each guarded as a single extend's is, and answers each in
// sent's order. A script the node refused with an error reply (the node
// list check, NOSCRIPT after a restart) goes again alone through the
// node's guarded path, all of those at once: it marks the node or loads
// the script, and the refused call changed nothing. The error returned is
// the pipeline's when it got no answer: the node's, for fanOut.
func extendOnNode[V any](ctx context.Context, r *Store, c extendCall[V], ni int, n *redlockNode,
	exts []lockstore.Extension, digests []string, sent []int,
) ([]batchAnswer[V], error) {
	pipe := n.renewals.Pipeline()
	guard := setGuard{Scripter: pipe, set: r.set, i: ni}
	cmds := make([]*redis.Cmd, len(sent))
	for j, i := range sent {
		cmds[j] = c.send(ctx, guard, exts[i].Key, digests[i], exts[i].TTL)
	}
	_, err := pipe.Exec(ctx) // the first failed command's error; each is read below
	var nodeErr error
	if err != nil && !isErrorReply(err) {
		nodeErr = script.RedisErr(err)
	}
	out := make([]batchAnswer[V], len(sent))
	var again sync.WaitGroup
	for j, i := range sent {
		if !isErrorReply(cmds[j].Err()) {
			out[j].val, out[j].err = c.read(cmds[j])
			continue
		}
		again.Add(1)
		r.spawn(func() {
			defer again.Done()
			out[j].val, out[j].err = c.on(ctx, n, exts[i].Key, digests[i], exts[i].TTL)
		})
	}
	again.Wait()
	return out, nodeErr
}

// isErrorReply: err is Redis's error reply to a command (it answered).
func isErrorReply(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}
