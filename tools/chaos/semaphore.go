package chaos

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgateway/lockgateway/internal/sleep"
	"github.com/lockgateway/lockgateway/lockstore"
)

// Semaphores under faults: clients take permits of one key through the
// gateways, every request recorded as an Op in a History of its own (the
// lock checkers would read permits held at once as overlapping locks), and
// CheckPermits counts, at every instant, the tokens that believed they held
// a permit.

// AcquirePermit sends PUT /semaphores/{key} with the caller's token.
func (c *Client) AcquirePermit(base, key, token string, limit int, ttl, wait, timeout time.Duration) Op {
	body := fmt.Sprintf(`{"limit":%d,"ttl_ms":%d`, limit, ttl.Milliseconds())
	if wait > 0 {
		body += fmt.Sprintf(`,"wait_ms":%d`, wait.Milliseconds())
	}
	body += "}"
	op := Op{Kind: Acquire, Key: key, Token: token, TTL: ttl}
	c.doAt(&op, "PUT", base+"/semaphores/"+key, body, timeout)
	return op
}

// ExtendPermit sends PATCH /semaphores/{key}.
func (c *Client) ExtendPermit(base, key, token string, ttl, timeout time.Duration) Op {
	op := Op{Kind: Extend, Key: key, Token: token, TTL: ttl}
	c.doAt(&op, "PATCH", base+"/semaphores/"+key, fmt.Sprintf(`{"ttl_ms":%d}`, ttl.Milliseconds()), timeout)
	return op
}

// ReleasePermit sends DELETE /semaphores/{key}.
func (c *Client) ReleasePermit(base, key, token string, timeout time.Duration) Op {
	op := Op{Kind: Release, Key: key, Token: token}
	c.doAt(&op, "DELETE", base+"/semaphores/"+key, "", timeout)
	return op
}

// SemWorkload is clients taking permits of one semaphore key: acquire
// (half of them waiting up to Wait) with a fresh token, retry a lost
// answer with the same token, hold up to Hold, maybe extend, release.
type SemWorkload struct {
	Gateways []string
	Indexes  []int // as Workload.Indexes
	Key      string
	// Limit is the limit client sends (a control passes a larger one).
	Limit   func(client int) int
	Clients int
	TTL     time.Duration
	Hold    time.Duration
	Wait    time.Duration
	Extend  float64
	// Twins is the probability that an acquire is sent twice at once, with
	// one token, through two gateways (a client retrying a request it
	// believes lost while the first is still in flight): both answers
	// granted must name one permit, one fence (TwinFences).
	Twins   float64
	History *History
	Client  *Client
	Seed    uint64

	twinsGranted atomic.Int64
	twinFences   []Violation // twins both granted with different fences
	mu           sync.Mutex
}

// TwinFences reports how many twins were both granted, and a violation for
// each pair answered two different fences.
func (w *SemWorkload) TwinFences() (both int64, violations []Violation) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.twinsGranted.Load(), slices.Clone(w.twinFences)
}

// twins sends one acquire twice at once, through gw and another gateway,
// records both, and returns the one the client goes on with: a grant if
// either was granted, else the first.
func (w *SemWorkload) twins(id, gw int, r *rand.Rand, token string, limit int, wait time.Duration) Op {
	gws := [2]int{gw, (gw + 1 + r.IntN(max(len(w.Gateways)-1, 1))) % len(w.Gateways)}
	var ops [2]Op
	var wg sync.WaitGroup
	for i := range ops {
		wg.Go(func() {
			ops[i] = w.record(w.Client.AcquirePermit(w.Gateways[gws[i]], w.Key, token, limit, w.TTL, wait, 3*time.Second+wait), id, gws[i])
		})
	}
	wg.Wait()
	granted := func(op Op) bool { return op.Result == Granted || op.Result == Renewed }
	if granted(ops[0]) && granted(ops[1]) {
		w.twinsGranted.Add(1)
		if ops[0].Fence != ops[1].Fence {
			w.mu.Lock()
			w.twinFences = append(w.twinFences, Violation{Checker: "permits", Key: w.Key, Detail: fmt.Sprintf(
				"twins of token %s were answered fences %d and %d", short(token), ops[0].Fence, ops[1].Fence)})
			w.mu.Unlock()
		}
	}
	if !granted(ops[0]) && granted(ops[1]) {
		return ops[1]
	}
	return ops[0]
}

// Start runs the clients until ctx ends; wait waits for them.
func (w *SemWorkload) Start(ctx context.Context) (wait func()) {
	var wg sync.WaitGroup
	for id := range w.Clients {
		r := rand.New(rand.NewPCG(w.Seed, uint64(1000+id)))
		wg.Go(func() { w.client(ctx, id, r) })
	}
	return wg.Wait
}

func (w *SemWorkload) record(op Op, client, gw int) Op {
	if w.Indexes != nil {
		gw = w.Indexes[gw]
	}
	op.Client, op.Gateway = client, gw
	w.History.Add(op)
	return op
}

func (w *SemWorkload) client(ctx context.Context, id int, r *rand.Rand) {
	limit := w.Limit(id)
	for ctx.Err() == nil {
		var wait time.Duration
		if w.Wait > 0 && r.IntN(2) == 0 {
			wait = time.Duration(r.Int64N(int64(w.Wait)))
		}
		gw := r.IntN(len(w.Gateways))
		token := lockstore.NewToken()
		var op Op
		if w.Twins > 0 && r.Float64() < w.Twins {
			op = w.twins(id, gw, r, token, limit, wait)
		} else {
			op = w.record(w.Client.AcquirePermit(w.Gateways[gw], w.Key, token, limit, w.TTL, wait, 3*time.Second+wait), id, gw)
		}
		for try := 0; op.Result == Unknown && try < 3; try++ {
			sleep.For(ctx, time.Duration(r.Int64N(int64(10*time.Millisecond))))
			gw = r.IntN(len(w.Gateways))
			op = w.record(w.Client.AcquirePermit(w.Gateways[gw], w.Key, token, limit, w.TTL, 0, 3*time.Second), id, gw)
		}
		switch op.Result {
		case Granted, Renewed:
			if w.Hold > 0 {
				time.Sleep(time.Duration(r.Int64N(int64(w.Hold))))
			}
			if r.Float64() < w.Extend && now() < op.Expires {
				gw = r.IntN(len(w.Gateways))
				w.record(w.Client.ExtendPermit(w.Gateways[gw], w.Key, token, w.TTL, 3*time.Second), id, gw)
			}
			gw = r.IntN(len(w.Gateways))
			w.record(w.Client.ReleasePermit(w.Gateways[gw], w.Key, token, 3*time.Second), id, gw)
		case Held:
			sleep.For(ctx, time.Millisecond+time.Duration(r.Int64N(int64(4*time.Millisecond))))
		default:
			sleep.For(ctx, 5*time.Millisecond+time.Duration(r.Int64N(int64(25*time.Millisecond))))
		}
	}
}

// CheckPermits reports every stretch of time during which more than limit
// tokens believed they held a permit of one key (a token believes from the
// answer of its grant or extension until its expires_at, or until it sends
// its release: holdings), and every fence given to two tokens; it returns
// the most tokens seen at once.
func CheckPermits(ops []Op, limit int) (violations []Violation, most int) {
	byFence := map[[2]string]string{} // key, fence → the first token granted it
	for _, op := range ops {
		if op.Result != Granted && op.Result != Renewed {
			continue
		}
		id := [2]string{op.Key, fmt.Sprint(op.Fence)}
		if first, ok := byFence[id]; !ok {
			byFence[id] = op.Token
		} else if first != op.Token {
			violations = append(violations, Violation{Checker: "permits", Key: op.Key, Detail: fmt.Sprintf(
				"fence %d granted to %s and to %s", op.Fence, short(first), short(op.Token))})
		}
	}
	for key, hs := range holdings(ops) {
		// One token's stretches may overlap (an extension): merge them,
		// so that a token counts once.
		byToken := map[string][]holding{}
		for _, h := range hs {
			byToken[h.token] = append(byToken[h.token], h)
		}
		type event struct {
			at    int64
			delta int
			token string
			fence int64
		}
		var events []event
		for token, list := range byToken {
			slices.SortFunc(list, func(a, b holding) int { return cmp.Compare(a.from, b.from) })
			cur := list[0]
			flush := func() {
				events = append(events, event{cur.from, 1, token, cur.fence}, event{cur.until, -1, token, cur.fence})
			}
			for _, h := range list[1:] {
				if h.from <= cur.until {
					cur.until = max(cur.until, h.until)
					continue
				}
				flush()
				cur = h
			}
			flush()
		}
		// Ends before starts at one instant: stretches are half-open.
		slices.SortFunc(events, func(a, b event) int {
			return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta))
		})
		holders := map[string]int64{}
		over := false
		for _, e := range events {
			if e.delta < 0 {
				delete(holders, e.token)
				over = over && len(holders) > limit
				continue
			}
			holders[e.token] = e.fence
			most = max(most, len(holders))
			if len(holders) > limit && !over {
				over = true // report each excursion once, where it starts
				var who []string
				for t, f := range holders {
					who = append(who, fmt.Sprintf("%s (fence %d)", short(t), f))
				}
				slices.Sort(who)
				violations = append(violations, Violation{Checker: "permits", Key: key, Detail: fmt.Sprintf(
					"%d holders at %s, limit %d: %s", len(holders), stamp(e.at), limit, strings.Join(who, ", "))})
			}
		}
	}
	return violations, most
}
