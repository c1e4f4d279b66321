// Package wait is the one waiting loop of every backend, for locks and
// permits alike: a caller that asked to wait (AcquireRequest.Wait,
// PermitRequest.Wait) tries, and while the key is busy (a lock held, a
// semaphore full) or the store did not answer, sleeps and tries again,
// until a try is decisive, the wait runs out or the caller's context ends.
//
// What differs between the stores is only how a waiter learns that its
// turn may have come (Turns), and what one try is; the store says that in
// the function it passes to For.
package wait

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/lockgateway/lockgateway/internal/sleep"
)

// Answer is what one try came to, as the loop needs it.
type Answer int

const (
	// Done: the try's answer is final (a grant, a refusal that waiting
	// cannot change, an error); the caller returns it.
	Done Answer = iota
	// Busy: the key is held (a lock) or full (a semaphore); the caller
	// waits for its turn.
	Busy
	// NoAnswer: the store did not answer (a Redis failing over, a burst
	// of thousands of waiters, a lost quorum); the same request is tried
	// again after a backoff. A grant whose answer was lost comes back as
	// the token's renewal, so a retry never takes a second place.
	NoAnswer
)

// Try is one try's outcome.
type Try struct {
	Answer Answer
	// Due, when Busy: try again no later than this, whatever else happens
	// (the holder's lease or the first permit runs out then, in case its
	// holder died); 0: no bound but the wait's end.
	Due time.Duration
}

// Queued is a busy try's Try for a store that tells turns (Told): the
// first waiter (head) also wakes once the holder's lease (a semaphore's
// first permit) has run out, remaining from the try, in case it is not
// released (its holder died); the others sleep until told. A millisecond
// more: the stores count in whole milliseconds. A remaining of 0 is a
// lease with under a millisecond left (Redis's PTTL rounds down), not
// none: without its bound the first waiter slept on until its room's
// heartbeat, about a second, when that lease then ran out unreleased.
func Queued(head bool, remaining time.Duration) Try {
	t := Try{Answer: Busy}
	if head {
		t.Due = max(remaining, 0) + time.Millisecond
	}
	return t
}

// Turns is how a store tells its waiters that their turn may have come.
type Turns int

const (
	// Told: the store queues its waiters and wakes the one whose turn it
	// is (Memory; Redis, by pub/sub and its gateway's heartbeat). A busy
	// waiter sleeps until woken or Due, and tries nothing in between.
	Told Turns = iota
	// Raced: no queue (Redlock, whose nodes could disagree on one). Every
	// waiter tries again when woken (a release happened; after a few
	// random milliseconds, so the waiters of many gateways do not all come
	// at once), else after an exponential backoff with full jitter, never
	// later than Due.
	Raced
)

// Backoffs: the first pause after a try that got no answer (or, Raced, a
// busy one), and the longest each kind of waiter grows it to. A told
// waiter that got no answer backs off to about its heartbeat's refresh (a
// second), as the store's own retries do.
const (
	firstBackoff = 10 * time.Millisecond
	toldBackoff  = time.Second
	racedBackoff = 500 * time.Millisecond
	racedSpread  = 5 * time.Millisecond
)

// For runs try until its answer is Done, or the wait ends: at deadline,
// with the last try's answer standing (the caller keeps it), or when ctx
// ends during a pause, when For returns ctx.Err(). wake, when a store
// tells (or hints) a turn, is buffered: a send while the caller is trying
// is not lost. A NoAnswer try when ctx has ended also ends the wait, with
// that try's answer.
func For(ctx context.Context, deadline time.Time, wake <-chan struct{}, turns Turns, try func() Try) error {
	backoff := firstBackoff
	for {
		t := try()
		left := time.Until(deadline)
		if t.Answer == Done || left <= 0 || (t.Answer == NoAnswer && ctx.Err() != nil) {
			return nil
		}
		if turns == Raced {
			next := left
			if t.Answer == Busy {
				next = t.Due
			}
			woken, ok := sleep.Until(ctx, max(min(rand.N(backoff)+time.Millisecond, next, left), time.Millisecond), wake)
			if !ok {
				return ctx.Err()
			}
			if woken {
				sleep.For(ctx, rand.N(racedSpread))
			}
			backoff = min(2*backoff, racedBackoff)
			continue
		}
		if t.Answer == NoAnswer {
			pause := min(backoff/2+rand.N(backoff/2), left)
			backoff = min(2*backoff, toldBackoff)
			if !sleep.For(ctx, pause) {
				return ctx.Err()
			}
			continue
		}
		backoff = firstBackoff
		nap := left
		if t.Due > 0 {
			nap = min(nap, t.Due)
		}
		if _, ok := sleep.Until(ctx, nap, wake); !ok {
			return ctx.Err()
		}
	}
}
