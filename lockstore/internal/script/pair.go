package script

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Pair sends the calls of two requests through a Batch as one pipeline,
// the lead's first: a release that frees a key, and the try of the waiter
// its gateway saw at the head of the key's queue (lockstore/redis's local
// handoff). Redis runs them in the order sent, so the try finds the key
// the release freed, one round trip after the DELETE came in instead of
// two and a pub/sub message.
//
// It changes when the try is sent, never what either call does: each is
// still its own request's script, with its own rule-D deadline, context
// and reply (docs/safety.md, "A waiter's try sent with the release").
//
// Each side's first grant-or-delete call (Deadlined) through the batch
// pairs: the first to arrive waits for the other at most pairWait, then
// goes alone; the second sends both. Every later call, and every call once
// one side went alone or Cancelled, goes as it would without a pair.
type Pair struct {
	mu      sync.Mutex
	waiting *pairCall // the side that came first, until the other takes it
	over    bool      // paired, or one side went alone or cancelled
}

type pairCall struct {
	lead    bool
	call    *batchCall
	decided chan struct{} // closed once the other side took it (joined) or cancelled
	joined  bool          // guarded by Pair.mu
}

// pairWait bounds how long one side of a pair waits for the other: about
// what a woken waiter takes to make its try on a busy gateway. A waiter
// whose request just ended never comes, and its release goes alone then.
// A variable only so that TestPair can give a loaded machine's scheduler
// room to bring the second side.
var pairWait = 2 * time.Millisecond

type pairKey struct{}

type pairSide struct {
	p    *Pair
	lead bool
}

// WithPair is ctx for the calls of one side of p: lead, the release.
func WithPair(ctx context.Context, p *Pair, lead bool) context.Context {
	return context.WithValue(ctx, pairKey{}, pairSide{p, lead})
}

// Cancel says that this side sends nothing (more) to pair: the other side,
// waiting or still to come, goes alone.
func (p *Pair) Cancel() {
	p.mu.Lock()
	p.over = true
	w := p.waiting
	p.waiting = nil
	p.mu.Unlock()
	if w != nil {
		close(w.decided)
	}
}

// paired is do for a grant or a delete of a side of a pair: the command
// with its reply, sent with the other side's; or nil, to be sent alone.
func (b *Batch) paired(ctx context.Context, side pairSide, args []any) *redis.Cmd {
	p := side.p
	p.mu.Lock()
	if p.over {
		p.mu.Unlock()
		return nil
	}
	me := &pairCall{lead: side.lead, call: &batchCall{ctx: ctx, cmd: redis.NewCmd(ctx, args...), done: make(chan struct{})}, decided: make(chan struct{})}
	if other := p.waiting; other != nil {
		p.waiting, p.over, other.joined = nil, true, true
		p.mu.Unlock()
		close(other.decided)
		batch := []*batchCall{other.call, me.call}
		if me.lead {
			batch[0], batch[1] = me.call, other.call
		}
		b.Mu.Lock()
		b.Senders++ // an extra sender, as a full batch's is
		b.Mu.Unlock()
		b.send(batch)
		b.handOff()
		return me.call.cmd
	}
	p.waiting = me
	p.mu.Unlock()
	wait := time.NewTimer(pairWait)
	defer wait.Stop()
	select {
	case <-me.decided:
	case <-wait.C:
	case <-ctx.Done():
	}
	p.mu.Lock()
	if p.waiting == me { // nobody came: go alone
		p.waiting, p.over = nil, true
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()
	<-me.decided // closed, or about to be, by whoever took me out
	if !me.joined {
		return nil // the other side cancelled
	}
	select {
	case <-me.call.done:
		return me.call.cmd
	case <-ctx.Done():
		return lateCmd(ctx, args)
	}
}

// pairOf is the side of a pair a call on ctx is, when it is a grant or a
// delete (the calls that pair).
func pairOf(ctx context.Context, args []any) (pairSide, bool) {
	side, ok := ctx.Value(pairKey{}).(pairSide)
	if !ok || len(args) < 2 {
		return pairSide{}, false
	}
	payload, _ := args[1].(string)
	switch args[0] {
	case "evalsha":
		return side, deadlined[payload]
	case "eval":
		return side, deadlined[Sha1Hex(payload)]
	}
	return pairSide{}, false
}
