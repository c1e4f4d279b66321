package wait_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/lockstore/internal/wait"
)

// tries runs For over a script of answers (the last one repeats) and
// returns when each try ran, from For's start.
func tries(t *testing.T, ctx context.Context, d time.Duration, wake chan struct{}, turns wait.Turns, answers ...wait.Try) ([]time.Duration, error) {
	t.Helper()
	start := time.Now()
	var at []time.Duration
	err := wait.For(ctx, start.Add(d), wake, turns, func() wait.Try {
		at = append(at, time.Since(start))
		return answers[min(len(at), len(answers))-1]
	})
	return at, err
}

func TestDoneEndsAtOnce(t *testing.T) {
	for _, turns := range []wait.Turns{wait.Told, wait.Raced} {
		at, err := tries(t, context.Background(), time.Minute, nil, turns, wait.Try{Answer: wait.Done})
		require.NoError(t, err)
		assert.Len(t, at, 1)
	}
}

// The first waiter whose try found under a millisecond left (Redis's PTTL
// rounds it down to 0) tries again a millisecond later, in case that lease
// runs out unreleased. It had no bound: only a wake-up, or its room's
// heartbeat (about a second), woke it; here the wait's end, 2 s.
func TestToldHeadWakesWithUnderAMillisecondLeft(t *testing.T) {
	at, err := tries(t, context.Background(), 2*time.Second, make(chan struct{}, 1), wait.Told,
		wait.Queued(true, 0), wait.Try{Answer: wait.Done})
	require.NoError(t, err)
	require.Len(t, at, 2)
	assert.Less(t, at[1]-at[0], 500*time.Millisecond, "tried again only %v after a try that found under a millisecond left", at[1]-at[0])
}

// A told waiter that is not first tries nothing until it is woken; then at
// once.
// (The second try is compared with when the wake was sent, both read from
// the monotonic clock: a bound from the wait's start was off by the time
// between arming the timer and the start, and failed once by 0.35 ms.)
func TestToldWaiterSleepsUntilWoken(t *testing.T) {
	wake := make(chan struct{}, 1)
	var sent time.Time // written before the send, read after the receive
	time.AfterFunc(300*time.Millisecond, func() {
		sent = time.Now()
		wake <- struct{}{}
	})
	answers := []wait.Try{wait.Queued(false, time.Millisecond), {Answer: wait.Done}}
	var at []time.Time
	err := wait.For(context.Background(), time.Now().Add(time.Minute), wake, wait.Told, func() wait.Try {
		at = append(at, time.Now())
		return answers[min(len(at), len(answers))-1]
	})
	require.NoError(t, err)
	require.Len(t, at, 2, "one try before the wake, one after")
	assert.True(t, at[1].After(sent), "no try before it was told: tried at %v, woken at %v", at[1], sent)
}

// The first waiter also tries when the holder's lease runs out, told or
// not; a waiter whose wait ran out stops with the last answer standing.
func TestToldHeadWakesAtTheLeaseEnd(t *testing.T) {
	at, err := tries(t, context.Background(), 2*time.Second, make(chan struct{}, 1), wait.Told,
		wait.Queued(true, 200*time.Millisecond), wait.Try{Answer: wait.Done})
	require.NoError(t, err)
	require.Len(t, at, 2)
	assert.GreaterOrEqual(t, at[1], 200*time.Millisecond)

	at, err = tries(t, context.Background(), 300*time.Millisecond, make(chan struct{}, 1), wait.Told, wait.Queued(false, 0))
	require.NoError(t, err, "the wait's end is no error: the last answer stands")
	assert.Len(t, at, 2, "a try, and one more when the wait ran out")
	assert.GreaterOrEqual(t, at[len(at)-1], 300*time.Millisecond)
}

// A try that got no answer is tried again, without being told, with a
// growing backoff, until the wait runs out; when the caller's context
// has ended it stops at once.
func TestNoAnswerIsTriedAgain(t *testing.T) {
	at, err := tries(t, context.Background(), 500*time.Millisecond, nil, wait.Told, wait.Try{Answer: wait.NoAnswer})
	require.NoError(t, err)
	assert.Greater(t, len(at), 3, "retried within the wait")
	assert.Less(t, len(at), 50, "backing off, not spinning")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	at, err = tries(t, ctx, time.Minute, nil, wait.Told, wait.Try{Answer: wait.NoAnswer})
	require.NoError(t, err, "the try's own answer stands")
	assert.Len(t, at, 1)
}

// A raced waiter (no queue) tries again no later than Due, told or not.
func TestRacedWaiterRetriesByDue(t *testing.T) {
	at, err := tries(t, context.Background(), time.Minute, make(chan struct{}, 1), wait.Raced,
		wait.Try{Answer: wait.Busy, Due: 50 * time.Millisecond}, wait.Try{Answer: wait.Busy, Due: 50 * time.Millisecond},
		wait.Try{Answer: wait.Done})
	require.NoError(t, err)
	require.Len(t, at, 3)
	assert.Less(t, at[2], 5*time.Second, "each retry within its Due, not at the wait's end")
}

func TestContextEndsTheWait(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	for _, turns := range []wait.Turns{wait.Told, wait.Raced} {
		_, err := tries(t, ctx, time.Minute, make(chan struct{}, 1), turns, wait.Queued(false, 0))
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	}
}
