package chaos

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgateway/lockgateway/internal/sleep"
	"github.com/lockgateway/lockgateway/lockstore"
)

// Workload is clients contending for keys through gateways. Each client
// loops: acquire a random key with a fresh token (its own, sent in
// Lock-Token), read the key's Register with the lease's fence, work a
// little, maybe extend, check that the lease has not run out, maybe pause
// past it (a GC pause between the check and the write), write the value
// back incremented, release. Every request is recorded in History.
type Workload struct {
	Gateways []string // base URLs; each request picks one at random
	Keys     []string
	Clients  int
	TTL      time.Duration // of every lease
	Hold     time.Duration // a holder works up to this long before writing
	Wait     time.Duration // half the acquires wait up to this long (0: none wait)
	Extend   float64       // probability that a holder extends its lease once
	Pause    float64       // probability that a holder pauses past its lease before writing
	// Retry is the probability that a client whose acquire got no answer
	// retries it with the same token (up to 3 times), as docs/api.md says is
	// safe: if the lost attempt took the key, the retry answers 200 with
	// its fence.
	Retry float64
	// Twins is the probability that an acquire is sent twice at once, with
	// the same token, through two different gateways (the same one when
	// there is only one): a client that retries a request it believes
	// lost while the first is still in flight. Both are recorded; the
	// client holds the lease if either was granted, and releases once.
	Twins float64
	// Timeout is each request's client-side timeout: a request that runs
	// out is abandoned. Nil: 3 s plus the acquire's wait.
	Timeout func(*rand.Rand) time.Duration
	// Registers holds one Register per key; missing ones are made fenced.
	Registers map[string]*Register
	History   *History
	Client    *Client
	Seed      uint64
	// Indexes, when set, are the gateways' numbers in the history
	// (Op.Gateway), one per entry of Gateways: a workload through some of a
	// cluster's gateways records them under the cluster's numbers. Unset,
	// a gateway's number is its place in Gateways.
	Indexes []int

	rejected atomic.Int64
	// Twins whose requests were both granted (201 or 200), and those of
	// them with two different fences.
	twinsGranted, twinsFences atomic.Int64
}

// TwinStats reports how many twins were both granted, 201 or 200 (the
// contract says the second should be a 200 with the same fence), and how
// many of those carried two different fences.
func (w *Workload) TwinStats() (bothGranted, twoFences int64) {
	return w.twinsGranted.Load(), w.twinsFences.Load()
}

// Start runs the clients until ctx ends and returns a function that waits
// for them to finish their current request. Requests in flight when ctx
// ends run to their own timeout, so the history ends with real outcomes
// rather than cancellations.
func (w *Workload) Start(ctx context.Context) (wait func()) {
	if w.Registers == nil {
		w.Registers = map[string]*Register{}
	}
	for _, k := range w.Keys {
		if w.Registers[k] == nil {
			w.Registers[k] = NewRegister(true)
		}
	}
	var wg sync.WaitGroup
	for id := range w.Clients {
		r := rand.New(rand.NewPCG(w.Seed, uint64(id)))
		wg.Go(func() { w.client(ctx, id, r) })
	}
	return wg.Wait
}

// Rejected counts answers outside the API's lock statuses (400, 422, 429,
// an unreadable success): a bug in the harness or the gateway.
func (w *Workload) Rejected() int64 { return w.rejected.Load() }

func (w *Workload) timeout(r *rand.Rand, wait time.Duration) time.Duration {
	if w.Timeout == nil {
		return 3*time.Second + wait
	}
	return w.Timeout(r)
}

func (w *Workload) record(op Op, client, gateway int) Op {
	if w.Indexes != nil {
		gateway = w.Indexes[gateway]
	}
	op.Client, op.Gateway = client, gateway
	if op.Result == Rejected {
		w.rejected.Add(1)
	}
	w.History.Add(op)
	return op
}

func (w *Workload) client(ctx context.Context, id int, r *rand.Rand) {
	for ctx.Err() == nil {
		key := w.Keys[r.IntN(len(w.Keys))]
		var wait time.Duration
		if w.Wait > 0 && r.IntN(2) == 0 {
			wait = time.Duration(r.Int64N(int64(w.Wait)))
		}
		gw := r.IntN(len(w.Gateways))
		token := lockstore.NewToken()
		var op Op
		if r.Float64() < w.Twins {
			op = w.twins(id, r, key, token, wait, gw)
		} else {
			op = w.record(w.Client.Acquire(w.Gateways[gw], key, token, w.TTL, wait, w.timeout(r, wait)), id, gw)
		}
		for try := 0; op.Result == Unknown && try < 3 && r.Float64() < w.Retry; try++ {
			sleep.For(ctx, time.Duration(r.Int64N(int64(10*time.Millisecond))))
			gw = r.IntN(len(w.Gateways))
			op = w.record(w.Client.Acquire(w.Gateways[gw], key, token, w.TTL, 0, w.timeout(r, 0)), id, gw)
		}
		switch op.Result {
		case Granted, Renewed:
			w.hold(id, r, op)
		case Held:
			sleep.For(ctx, time.Millisecond+time.Duration(r.Int64N(int64(4*time.Millisecond))))
		default:
			sleep.For(ctx, 5*time.Millisecond+time.Duration(r.Int64N(int64(25*time.Millisecond))))
		}
	}
}

// twins sends the same acquire twice at once, through gateway gw and
// another one, records both, and returns what the client makes of them: a
// grant if either was granted (the one with the higher fence, then the
// later expiry, if both were), else a 409 if either was refused, else an
// unknown outcome.
func (w *Workload) twins(id int, r *rand.Rand, key, token string, wait time.Duration, gw int) Op {
	gws := [2]int{gw, gw}
	if n := len(w.Gateways); n > 1 {
		gws[1] = (gw + 1 + r.IntN(n-1)) % n
	}
	timeouts := [2]time.Duration{w.timeout(r, wait), w.timeout(r, wait)}
	var ops [2]Op
	var wg sync.WaitGroup
	for i := range ops {
		wg.Go(func() {
			ops[i] = w.record(w.Client.Acquire(w.Gateways[gws[i]], key, token, w.TTL, wait, timeouts[i]), id, gws[i])
		})
	}
	wg.Wait()
	rank := func(op Op) int {
		switch op.Result {
		case Granted, Renewed:
			return 2
		case Held:
			return 1
		}
		return 0
	}
	a, b := ops[0], ops[1]
	if (a.Result == Granted || a.Result == Renewed) && (b.Result == Granted || b.Result == Renewed) {
		w.twinsGranted.Add(1)
		if a.Fence != b.Fence {
			w.twinsFences.Add(1)
		}
	}
	switch ra, rb := rank(a), rank(b); {
	case ra != rb:
		if rb > ra {
			return b
		}
		return a
	case ra == 2 && (b.Fence > a.Fence || b.Fence == a.Fence && b.Expires > a.Expires):
		return b
	}
	return a
}

// hold is what a client does with a lease; it always ends with a release,
// even of a lease it knows is gone, as a careful client would.
func (w *Workload) hold(id int, r *rand.Rand, lease Op) {
	key, token, fence, expires := lease.Key, lease.Token, lease.Fence, lease.Expires
	reg := w.Registers[key]
	if now() < expires {
		if v, ok := reg.Read(fence); ok {
			if w.Hold > 0 {
				time.Sleep(time.Duration(r.Int64N(int64(w.Hold))))
			}
			if r.Float64() < w.Extend && now() < expires {
				gw := r.IntN(len(w.Gateways))
				ext := w.record(w.Client.Extend(w.Gateways[gw], key, token, w.TTL, w.timeout(r, 0)), id, gw)
				switch ext.Result {
				case Extended:
					expires = ext.Expires
				case NotHeld, Mismatch:
					expires = 0 // lost; an unknown outcome leaves the old lease
				}
			}
			if now() < expires { // the check a careful client makes…
				if r.Float64() < w.Pause { // …and a pause right after it
					time.Sleep(time.Duration(expires-now()) + w.TTL/2)
				}
				reg.Write(fence, v+1)
			}
		}
	}
	gw := r.IntN(len(w.Gateways))
	w.record(w.Client.Release(w.Gateways[gw], key, token, w.timeout(r, 0)), id, gw)
}
