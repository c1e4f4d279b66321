package redlock

import (
	"fmt"
	"sync"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
)

// admission bounds the acquire rounds (locks' and permits') in flight by
// what the nodes have kept up with lately, as TCP bounds its window:
// halved when a round could not hear a majority because calls timed out
// (at most once per NodeTimeout, so that one stall cuts it once), and
// grown by one per limit's worth of rounds that could, and doubled for
// each second without a cut, so that a limit cut in one burst does not
// refuse the next burst long after the nodes caught up; back at admitMax
// there is no limit. A round over the limit is refused before it sends
// anything (errOverloaded, a 503); an earlier round of the same request
// (a split vote's, a waiter's earlier try) may have sent, so the answer is
// a 503's: retry with the same token.
//
// Why: on a host whose CPU the nodes share (or a gateway past what its
// cores serve), a burst of acquires slowed every node call past
// NodeTimeout. Each miss closed its connection, renewals failed beside
// the acquires, and holds that had been granted were lost; with this and
// the renewals' longer wait (renewalTimeout) none were
// (docs/performance-history.md, the eleventh round). New acquires are
// what can wait; held leases cannot. Liveness only: a refused round wrote
// nothing.
type admission struct {
	every time.Duration // at most one cut per this: NodeTimeout

	mu         sync.Mutex
	limit      float64
	inflight   int
	lastChange time.Time // the last cut or doubling
	refused    uint64    // rounds refused since the store opened
}

// Admission is what the admission of acquire rounds is doing, for
// operators (lockgw_redlock_admission_*): Limit is how many rounds may be
// in flight at once, 0 when nothing is refused (the nodes keep up);
// InFlight how many are; Refused how many rounds were refused since the
// store opened, each answered 503 without sending anything.
type Admission struct {
	Limit    int
	InFlight int
	Refused  uint64
}

// Admission reports the admission of acquire rounds.
func (r *Store) Admission() Admission {
	a := r.admit
	a.mu.Lock()
	defer a.mu.Unlock()
	st := Admission{InFlight: a.inflight, Refused: a.refused}
	if a.limit < admitMax {
		st.Limit = int(a.limit)
	}
	return st
}

const (
	// admitMax is where a store starts and what it grows back to: there,
	// nothing is refused (the nodes have kept up), however many rounds a
	// burst sends.
	admitMax = 1024
	// admitMin is the floor of the cuts: a few rounds always go, and
	// their answers say when the nodes have caught up.
	admitMin = 8
	// admitCalm is how long the limit goes without a cut before it
	// doubles.
	admitCalm = time.Second
)

func newAdmission(every time.Duration) *admission {
	return &admission{limit: admitMax, every: every}
}

// errOverloaded is an acquire round refused by the admission.
var errOverloaded = fmt.Errorf("%w: the Redlock nodes are not keeping up (acquire rounds lately reached no majority in time), so this gateway runs fewer acquire rounds at once until they do, and did not send this one; retry with the same token after Retry-After", lockstore.ErrUnavailable)

// enter admits a round, or refuses it with errOverloaded. An admitted
// round calls leave once its votes are in.
func (a *admission) enter() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.limit < admitMax && a.inflight >= int(a.limit) {
		a.refused++
		return errOverloaded
	}
	a.inflight++
	return nil
}

// leave ends an admitted round; congested says that it heard no majority
// and a call timed out.
func (a *admission) leave(congested bool, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inflight--
	switch {
	case congested && now.Sub(a.lastChange) >= a.every:
		a.limit = max(a.limit/2, admitMin)
		a.lastChange = now
	case !congested:
		a.limit += 1 / a.limit
		if now.Sub(a.lastChange) >= admitCalm {
			a.limit *= 2
			a.lastChange = now
		}
		a.limit = min(a.limit, admitMax)
	}
}

// congested says whether a round's votes heard no majority while a call
// timed out: the nodes, or this gateway, not keeping up. Nodes skipped as
// down, refusals and answers are not that.
func congested[T any](r *Store, votes []nodeResult[T]) bool {
	return timedOut(votes) && !r.q().all(answeredMask(votes))
}

// timedOut says whether a call of votes timed out.
func timedOut[T any](votes []nodeResult[T]) bool {
	for _, v := range votes {
		if v.err != nil && failedVote(v.err) == "timeout" {
			return true
		}
	}
	return false
}
