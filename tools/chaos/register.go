package chaos

import (
	"fmt"
	"sync"
)

// Register is the resource a lock protects in the workloads: a counter that
// each holder reads, and writes back incremented. Fenced, it does what
// docs/api.md asks of a resource: it remembers the highest fence it has seen and
// refuses reads and writes that carry a lower one, in the same atomic step.
// Checking reads too matters: a holder that read before a newer holder's
// read and writes after it would otherwise write back a stale value.
//
// Unfenced, it accepts everything: the control that shows what a lock alone
// (a lease without fences) lets through.
type Register struct {
	mu      sync.Mutex
	fenced  bool
	value   int64
	highest int64
	stats   RegisterStats
}

// RegisterStats counts what a register saw.
type RegisterStats struct {
	Value       int64 // the counter now
	Acked       int64 // increments acknowledged to a holder
	StaleReads  int64 // reads refused for a fence below the highest seen
	StaleWrites int64 // writes refused likewise
}

// NewRegister returns a counter at zero; fenced says whether it checks
// fences.
func NewRegister(fenced bool) *Register { return &Register{fenced: fenced} }

// Read returns the value for a holder with fence f, or false when a higher
// fence has been seen (the holder's lease is gone).
func (r *Register) Read(f int64) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fenced {
		if f < r.highest {
			r.stats.StaleReads++
			return 0, false
		}
		r.highest = f
	}
	return r.value, true
}

// Write stores v for a holder with fence f and acknowledges it, or refuses
// it when a higher fence has been seen. Equal fences pass: one holder may
// write many times under one lease.
func (r *Register) Write(f, v int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fenced {
		if f < r.highest {
			r.stats.StaleWrites++
			return false
		}
		r.highest = f
	}
	r.value = v
	r.stats.Acked++
	return true
}

// Stats reports the counter and what happened to it.
func (r *Register) Stats() RegisterStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Value = r.value
	return s
}

// CheckCounter reports a violation when the acknowledged increments of the
// register for key differ from its final value: an update was lost (two
// holders incremented the same value) or invented.
func CheckCounter(key string, r *Register) []Violation {
	s := r.Stats()
	if s.Value == s.Acked {
		return nil
	}
	return []Violation{{Checker: "counter", Key: key, Detail: fmt.Sprintf(
		"%d increments acknowledged but the counter is %d: %d updates lost", s.Acked, s.Value, s.Acked-s.Value)}}
}
