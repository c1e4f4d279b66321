package redis

import (
	"container/list"
	"context"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/lockgateway/lockgateway/lockstore/internal/wait"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A release through the gateway whose waiter was told it is first sends
// that waiter's try in its own pipeline, right behind it: one write
// carries both scripts, and the waiter is granted by that try.
func TestReleaseCarriesTheFirstWaitersTry(t *testing.T) {
	srv := redistest.Start(t)
	s := openInternal(t, srv)
	ctx := context.Background()
	const key = "handoff/first"

	holder := lockstore.NewToken()
	for _, k := range []string{"warm-up", key} { // the first release loads its script
		_, err := s.Acquire(ctx, k, lockstore.AcquireRequest{Token: holder, TTL: time.Minute})
		require.NoError(t, err)
	}
	require.NoError(t, s.Release(ctx, "warm-up", holder))
	waiter := lockstore.NewToken()
	granted := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: waiter, TTL: time.Minute, Wait: 20 * time.Second})
		granted <- err
	}()
	require.Eventually(t, func() bool { return s.handoffReady(key) }, 5*time.Second, time.Millisecond, "the waiter was told it is first")

	// With replicas to wait for, the waiter's try goes on a connection of
	// its own with its WAIT, not through the batch: a release must not wait
	// for it there.
	s.acks.replicas = 1
	assert.Nil(t, s.handoff(key), "no pair with replicas to wait for")
	s.acks.replicas = 0

	writes, calls := s.batch.Writes.Load(), s.batch.Calls.Load()
	require.NoError(t, s.Release(ctx, key, holder))
	require.NoError(t, <-granted)
	assert.Equal(t, int64(1), s.batch.Writes.Load()-writes, "one write for the release and the try")
	assert.Equal(t, int64(2), s.batch.Calls.Load()-calls, "two scripts: the release, the waiter's try")
}

// handoffReady: key's oldest waiter here can go with a release.
func (s *Store) handoffReady(key string) (ready bool) {
	s.oldest(key, func(w *roomWaiter) { ready = w.resting() })
	return ready
}

// A grant that makes a waiter first tells it the lease's length only when
// its ticket says its gateway reads that ("<gateway>.~<id>"); the ticket of
// a gateway of an earlier version (a rolling upgrade) gets the plain id its
// waiter tries on, or it would never hear its turn come.
func TestGrantTellsEachTicketItsForm(t *testing.T) {
	srv := redistest.Start(t)
	s := openInternal(t, srv)
	ctx := context.Background()
	c := srv.Client()
	for _, next := range []string{"oldgw.abc", "newgw.~abc"} {
		key := "told/" + next
		holder := lockstore.NewToken()
		_, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: holder, TTL: time.Minute})
		require.NoError(t, err)
		first := script.AcquireArgs{Digest: script.DigestHex(lockstore.NewToken()), Ttl: time.Minute, Owner: "o", Publish: script.PublishAll,
			Ticket: script.WaitTicket{Id: "gw.~first", Heartbeat: time.Minute}}
		second := script.AcquireArgs{Digest: script.DigestHex(lockstore.NewToken()), Ttl: time.Minute, Owner: "o", Publish: script.PublishAll,
			Ticket: script.WaitTicket{Id: next, Heartbeat: time.Minute}}
		for _, a := range []script.AcquireArgs{first, second} {
			r, err := script.Acquire(ctx, s.clocked(s.client), key, a)
			require.NoError(t, err)
			require.Equal(t, script.AcquireHeld, r.Code, "queued")
		}
		require.NoError(t, s.Release(ctx, key, holder))

		sub := c.Subscribe(ctx, script.Channel(key))
		_, err = sub.Receive(ctx) // the subscription's confirmation
		require.NoError(t, err)
		r, err := script.Acquire(ctx, s.clocked(s.client), key, first)
		require.NoError(t, err)
		require.Equal(t, script.AcquireNew, r.Code, "the first waiter's grant")
		msg, err := sub.ReceiveMessage(ctx)
		require.NoError(t, err)
		want := next // an earlier version's ticket: the plain id
		if next == "newgw.~abc" {
			want = next + ">60000>" + first.Digest
		}
		assert.Equal(t, want, msg.Payload, "what the grant tells %s", next)
		require.NoError(t, sub.Close())
	}
}

// A waiter that a release promised to its pipeline (handoff) between its
// wait's first try and the wait proper answers that first try without a
// call: it withdraws the promise, so the release does not wait out
// pairWait for a try that is not coming (found by review).
func TestFirstTryWithdrawsAPromisedTry(t *testing.T) {
	w := &roomWaiter{ticket: "gw.~t", wake: make(chan struct{}, 1), queued: true, head: true}
	r := &room{key: "k", byID: map[string]*list.Element{}, order: list.New()}
	r.byID[w.ticket] = r.order.PushBack(w)
	p := &script.Pair{}
	w.pair = p
	q := &waiting{r: r, w: w, queued: &wait.Try{Answer: wait.Busy}}
	assert.Equal(t, wait.Busy, q.tryAside().Answer, "the first try's answer")
	assert.Nil(t, w.pair, "the promise withdrawn")
	assert.True(t, w.resting(), "another release may promise it again")
}
