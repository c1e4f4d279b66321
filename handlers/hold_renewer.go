package handlers

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
)

// renewSlot is how finely holds' renewals are grouped: a renewal due at t
// goes out at the start of t's slot (never later than due), with every
// other renewal of that slot, in one backend call where the store can
// batch (lockstore.BatchExtender, BatchSemExtender: one pipeline, one
// round trip to Redis).
// 10 000 holds of 5 s renew about 6 000 times a second, but in at most 20
// calls a second.
const renewSlot = 50 * time.Millisecond

// renewer sends holds' renewals in batches (see renewSlot): one renewer
// for locks' leases, one for permits.
type renewer struct {
	// extend extends exts, in one call where the store batches, and
	// answers each in exts' order.
	extend  func(ctx context.Context, exts []lockstore.Extension) []renewal
	timeout time.Duration

	mu      sync.Mutex
	pending map[int64][]renewRequest // by slot
	timer   *time.Timer
	next    int64 // the slot the timer is set for; 0 when none
}

type renewRequest struct {
	ext  lockstore.Extension
	done chan<- renewal
	wake func() // nil, or called once the outcome is on done
	// dropped: the hold ended before the renewal went out (renew's
	// cancel); fire leaves it out.
	dropped *atomic.Bool
}

// newRenewer renews leases of store.
func newRenewer(store lockstore.Store, timeout time.Duration) *renewer {
	return &renewer{extend: func(ctx context.Context, exts []lockstore.Extension) []renewal {
		out := make([]renewal, len(exts))
		for i, e := range lockstore.ExtendAll(ctx, store, exts) {
			out[i] = renewal{e.Lease.ExpiresAt, e.Err}
		}
		return out
	}, timeout: timeout, pending: make(map[int64][]renewRequest)}
}

// newPermitRenewer renews permits of sems; obs hears each renewal as an
// extend (Observer.PermitOp).
func newPermitRenewer(sems lockstore.Semaphores, timeout time.Duration, obs Observer) *renewer {
	return &renewer{extend: func(ctx context.Context, exts []lockstore.Extension) []renewal {
		out := make([]renewal, len(exts))
		for i, e := range lockstore.SemExtendAll(ctx, sems, exts) {
			out[i] = renewal{e.Permit.ExpiresAt, e.Err}
			obs.PermitOp("extend", permitOpOutcome(e.Err))
		}
		return out
	}, timeout: timeout, pending: make(map[int64][]renewRequest)}
}

// renew extends ext's lease (or permit) at at (at the start of its slot) and delivers
// the outcome on the returned channel, which has room for it: a hold that
// stopped waiting leaves nothing blocked. wake, when not nil, is called
// once the outcome is there: a hold served on its connection
// (hold_conn.go) waits in a read, not on the channel. cancel drops the
// renewal unless it went out already; its channel then gets nothing.
func (r *renewer) renew(at time.Time, ext lockstore.Extension, wake func()) (outcome <-chan renewal, cancel func()) {
	done := make(chan renewal, 1)
	dropped := new(atomic.Bool)
	slot := at.UnixNano() / int64(renewSlot)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending[slot] = append(r.pending[slot], renewRequest{ext, done, wake, dropped})
	if r.next == 0 || slot < r.next {
		r.next = slot
		wait := time.Until(time.Unix(0, slot*int64(renewSlot)))
		if r.timer == nil {
			r.timer = time.AfterFunc(wait, r.fire)
		} else {
			r.timer.Reset(wait)
		}
	}
	return done, func() { dropped.Store(true) }
}

// fire sends every renewal whose slot has come, and sets the timer for the
// next slot.
func (r *renewer) fire() {
	now := time.Now().UnixNano() / int64(renewSlot)
	var batch []renewRequest
	r.mu.Lock()
	r.next = 0
	for slot, reqs := range r.pending {
		if slot <= now {
			for _, req := range reqs {
				if !req.dropped.Load() {
					batch = append(batch, req)
				}
			}
			delete(r.pending, slot)
		} else if r.next == 0 || slot < r.next {
			r.next = slot
		}
	}
	if r.next != 0 {
		r.timer.Reset(time.Until(time.Unix(0, r.next*int64(renewSlot))))
	}
	r.mu.Unlock()
	if len(batch) > 0 {
		go r.send(batch)
	}
}

// send extends batch's leases, in one call where the store batches.
func (r *renewer) send(batch []renewRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	exts := make([]lockstore.Extension, len(batch))
	for i, req := range batch {
		exts[i] = req.ext
	}
	for i, out := range r.extend(ctx, exts) {
		batch[i].done <- out
		if batch[i].wake != nil {
			batch[i].wake()
		}
	}
}
