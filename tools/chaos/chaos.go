// Package chaos is lockgateway's fault-injection harness: real redis-server
// and gateway processes, an embedded toxiproxy between each gateway and each
// node, clients that drive the HTTP API and record every operation, and the
// checkers that judge the recorded history.
//
// Every timestamp is the host's wall clock (CLOCK_REALTIME) in nanoseconds,
// read by the process that produced it: the client for when it sent a
// request and when the answer arrived, the gateway for expires_at. They are
// one clock because everything runs on one host, and it is the clock Redis
// expires keys by, so a client's receive time and a gateway's expires_at can
// be compared without conversion. (A node whose clock the harness shifts
// runs on another clock on purpose: that is the fault.)
//
// The checkers are sound by construction, so a loaded machine can make a run
// slower but never make a correct history fail:
//
//   - CheckOverlap: no two tokens believe they hold a key at once. A client
//     believes it holds a lease from the moment the grant (or an extension)
//     reached it until the earlier of the lease's expires_at and the moment
//     it sent the release.
//   - CheckLinearizable: the history of each key is linearizable against a
//     lease model (see LeaseModel), checked with porcupine.
//   - CheckFences: a grant that started after another grant had returned
//     carries a higher fence; no two grants share a fence.
//   - Register and CheckCounter: a counter protected by the lock, in a store
//     that refuses reads and writes carrying a fence below the highest it
//     has seen; acknowledged increments must equal the final value.
//   - State: every lockgw key in Redis has a TTL, no lock key outlives the
//     maximum TTL, and none is left once the maximum TTL has passed.
package chaos

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Kind is what an operation asked for.
type Kind uint8

// The operations the clients make.
const (
	Acquire Kind = iota + 1 // PUT /locks/{key}
	Extend                  // PATCH /locks/{key}
	Release                 // DELETE /locks/{key}
)

func (k Kind) String() string {
	switch k {
	case Acquire:
		return "acquire"
	case Extend:
		return "extend"
	case Release:
		return "release"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Result is what a client learned from an operation.
type Result uint8

// Results, from the HTTP status (or its absence).
const (
	// Unknown: no answer (the client gave up, the connection broke) or a
	// 5xx. The operation may or may not have taken effect, possibly after
	// the client stopped waiting.
	Unknown  Result = iota
	Granted         // 201: a new lease
	Renewed         // 200 to a PUT: the token already held the key
	Extended        // 200 to a PATCH
	Released        // 204
	Held            // 409: not granted; says nothing certain about who holds it
	NotHeld         // 404: the token does not hold the key
	Mismatch        // 412: the token does not hold the key, another one may
	Rejected        // any other 4xx: the request never reached the store (a harness bug)
)

func (r Result) String() string {
	return [...]string{"unknown", "granted", "renewed", "extended", "released", "held", "not-held", "mismatch", "rejected"}[r]
}

// Op is one request a client made and what came of it.
type Op struct {
	Client  int    // the client's number
	Gateway int    // index of the gateway the request went to
	Key     string // the lock key
	Kind    Kind
	Token   string
	TTL     time.Duration // asked for (Acquire, Extend)
	// Call is the wall clock just before the request was sent and Return
	// just after the answer arrived or the client gave up, in ns since the
	// epoch.
	Call, Return int64
	Result       Result
	Status       int   // HTTP status; 0 when no answer arrived
	Fence        int64 // Granted, Renewed, Extended
	// Expires is the answer's expires_at in ns since the epoch (Granted,
	// Renewed, Extended): a conservative end of the lease.
	Expires int64
}

// History is the operations of a run, safe for concurrent clients.
type History struct {
	mu  sync.Mutex
	ops []Op
}

// Add records an operation.
func (h *History) Add(op Op) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// Ops returns a copy of the operations recorded so far.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}

// Count reports how many operations of kind ended in result (any kind when
// kind is 0).
func Count(ops []Op, kind Kind, result Result) int {
	n := 0
	for _, op := range ops {
		if (kind == 0 || op.Kind == kind) && op.Result == result {
			n++
		}
	}
	return n
}

// grants returns the acquires that made their token the key's new holder:
// every Granted one, and a Renewed one whose token had no grant before it.
// The latter is a client retrying with the same token after an attempt
// whose answer it never got: that attempt took the key, and the renewal is
// the first the client hears of it. Its Call is moved back to the token's
// first attempt, since the grant may have happened any time after that.
func grants(ops []Op) []Op {
	first := map[string]int64{}
	granted := map[string]bool{}
	for _, op := range ops {
		if op.Kind != Acquire {
			continue
		}
		if c, ok := first[op.Token]; !ok || op.Call < c {
			first[op.Token] = op.Call
		}
		if op.Result == Granted {
			granted[op.Token] = true
		}
	}
	var out []Op
	for _, op := range ops {
		switch {
		case op.Kind != Acquire:
		case op.Result == Granted:
			out = append(out, op)
		case op.Result == Renewed && !granted[op.Token]:
			op.Call = first[op.Token]
			out = append(out, op)
		}
	}
	return out
}

// Violation is one thing a checker found wrong.
type Violation struct {
	Checker string // "overlap", "linearizability", "fences", "counter", "state"
	Key     string
	Detail  string
}

func (v Violation) String() string { return v.Checker + ": " + v.Key + ": " + v.Detail }

// Checkers, in the order reports list them.
var Checkers = []string{"overlap", "linearizability", "fences", "counter", "state"}

// now is the wall clock in ns since the epoch.
func now() int64 { return time.Now().UnixNano() }

// stamp renders a wall-clock ns timestamp for a violation's detail.
func stamp(ns int64) string {
	return time.Unix(0, ns).UTC().Format("15:04:05.000000")
}
