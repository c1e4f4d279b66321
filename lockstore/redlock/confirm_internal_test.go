package redlock

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/stretchr/testify/require"
)

// TestRedlockConfirmCountsVotedNodesOnly: a node quarantined when round
// y's votes are tallied, counted again when its confirmation answers. Its
// value (a failed round w's, fence above y's F) was left unmarked by
// C(w, F), which answered 1, and y counted it as carrying F confirmed;
// w's late withdrawal W(w) then deleted it, y's majority was one node, and
// another token was granted the key while y held it (found by an
// adversarial review of the protocol). Now a confirmation counts only on
// a node that counted for the votes, and a value whose fence is above F
// answers "not confirmed": y, confirmed on n1 alone (n2's confirmation
// lands after its deadline), answers unavailable.
func TestRedlockConfirmCountsVotedNodesOnly(t *testing.T) {
	for _, flip := range []bool{false, true} {
		t.Run("flip="+strconv.FormatBool(flip), func(t *testing.T) {
			srvs := []*redistest.Server{redistest.Start(t), redistest.Start(t), redistest.Start(t)}
			p := redistest.NewProxy(t, srvs[1].Addr(), 0)
			const timeout = 300 * time.Millisecond
			var r *Store
			armed := false
			names := []string{srvs[0].Addr(), srvs[1].Addr(), srvs[2].Addr()}
			opts := Options{NodeNames: names, NodeTimeout: timeout, MaxTTL: time.Hour, OnVote: func(node, vote string) {
				if !armed {
					return
				}
				if node == r.nodes[1].addr {
					p.SetDelay(3 * timeout) // y's C to n2 reaches it after its deadline
				}
				if node == r.nodes[2].addr && flip {
					n := r.nodes[2]
					n.mu.Lock()
					n.quarantinedUntil = time.Now() // the quarantine ends right after the votes
					n.mu.Unlock()
				}
			}}
			var err error
			r, err = Open([]string{srvs[0].URL(), p.URL(), srvs[2].URL()}, opts)
			require.NoError(t, err)
			t.Cleanup(func() { _ = r.Close() })
			ctx := context.Background()
			require.Eventually(t, func() bool { return r.Ping(ctx) == nil }, 10*time.Second, 20*time.Millisecond)
			// Warm the pools, so that no staged call waits for a handshake.
			for i := range 4 {
				tok := lockstore.NewToken()
				if _, err := r.Acquire(ctx, "w"+strconv.Itoa(i), lockstore.AcquireRequest{Token: tok, TTL: time.Second}); err == nil {
					_ = r.Release(ctx, "w"+strconv.Itoa(i), tok)
				}
			}
			n3 := r.nodes[2]
			n3.mu.Lock()
			n3.quarantinedUntil = time.Now().Add(time.Hour) // n3's restart was seen
			n3.mu.Unlock()

			token := lockstore.NewToken()
			d := script.DigestHex(token)
			// What A(w) of a failed round w of token d wrote on n3 (n3's clock
			// 5 s ahead: its vote now - margin); A(w) on n1, n2 was lost, and
			// W(w) is still on the wire.
			fw := time.Now().Add(5 * time.Second).UnixMicro()
			c3 := srvs[2].Client()
			require.NoError(t, c3.Set(ctx, "lockgw:{k}:fence", fw, time.Minute).Err())
			require.NoError(t, c3.Set(ctx, "lockgw:{k}:lock", d+":~w0000000000000000000000:"+strconv.FormatInt(fw, 10)+"+30000:", 2*time.Second).Err())

			armed = true
			y, err := r.Acquire(ctx, "k", lockstore.AcquireRequest{Token: token, TTL: 30 * time.Second})
			armed = false
			p.SetDelay(0)
			if err != nil {
				require.ErrorIs(t, err, lockstore.ErrUnavailable, "only n1 confirmed")
				return
			}
			require.True(t, flip, "without the quarantine ending, only n1 can confirm")
			t.Logf("y answered fence %d (w's fence on n3 %d), expires %v", y.Fence, fw, time.Until(y.ExpiresAt))
			for i, s := range srvs {
				v, _ := s.Client().Get(ctx, "lockgw:{k}:lock").Result()
				pt, _ := s.Client().PTTL(ctx, "lockgw:{k}:lock").Result()
				t.Logf("n%d: %s pttl %v", i+1, strings.Replace(v, d, "d", 1), pt)
			}
			_, eerr := r.Extend(ctx, "k", token, 0)
			t.Logf("the holder's extend right after its 201: %v", eerr)

			// W(w) lands.
			got, err := script.DiscardScript.Run(ctx, c3, []string{script.LockKey("k"), script.QueueKey("k")}, d, "w0000000000000000000000", script.Channel("k")).Int()
			require.NoError(t, err)
			t.Logf("late W(w) on n3: %d", got)

			// Another gateway, another token, once y's provisional value on n2 expired.
			q, err := Open([]string{srvs[0].URL(), srvs[1].URL(), srvs[2].URL()}, Options{NodeNames: names, NodeTimeout: timeout})
			require.NoError(t, err)
			t.Cleanup(func() { _ = q.Close() })
			time.Sleep(r.provisional(30*time.Second) + 200*time.Millisecond)
			other, err := q.Acquire(ctx, "k", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 10 * time.Second})
			if err == nil && time.Now().Before(y.ExpiresAt) {
				t.Fatalf("TWO HOLDERS: d holds fence %d for %v more; d' granted fence %d", y.Fence, time.Until(y.ExpiresAt), other.Fence)
			}
			require.ErrorIs(t, err, lockstore.ErrHeld)
		})
	}
}
