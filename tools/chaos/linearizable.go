package chaos

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// expirySlack covers Redis's millisecond expiry arithmetic: a key set with
// PX t at wall time w is gone by w+t+1ms.
const expirySlack = 5 * time.Millisecond

// leaseState is the lease model's state for one key.
//
// A lease is not a register: it ends by itself, at a moment nobody observes
// exactly. The model therefore keeps, for the current holder, the time
// until which it certainly holds the key (Sure: the expires_at of the
// latest grant or extension it was told about, which the gateway computes
// conservatively) and the time after which it certainly does not (Maybe:
// the moment that answer arrived plus the TTL, since every node set the
// TTL before answering). Between the two, the lease may be over or not.
//
// Operations are linearized at a point in time between their call and
// their return; At is the point chosen for the last one, and the next must
// not come before it. The model chooses each point as early as the
// operation allows: later operations can only gain from an earlier one.
type leaseState struct {
	Holder string
	Sure   int64 // the holder holds the key at least until then (math.MinInt64: not certainly)
	Maybe  int64 // and certainly not after then (math.MaxInt64: unknown)
	Fence  int64 // the highest fence granted so far
	At     int64 // the linearization point of the last operation
}

type leaseInput struct {
	Kind  Kind
	Token string
	TTL   int64 // ns
	Call  int64
}

type leaseOutput struct {
	Result  Result
	Fence   int64
	Expires int64
	Return  int64
}

// LeaseModel is the sequential specification the lock history of one key
// must be linearizable against:
//
//   - acquire → granted(F, E) at t: nobody certainly holds the key at t
//     (no holder, or t is past the holder's Sure), and F is above every
//     fence granted before. The caller becomes the holder, surely until E.
//     A renewal (200) to a token that retried after losing an answer is
//     the same (see grants); a renewal to the holder extends its lease, and
//     so does a grant (201) to the holder while it may still hold the key
//     (twins sent at once that each created the lease on some nodes; the
//     highest fence counts). Which of 200 and 201 the holder is told is
//     not a safety matter, and Workload.TwinStats counts these.
//   - extend → extended(E): the caller is the holder and may still hold
//     the key (t before Maybe); it now holds surely until E.
//   - release → released: likewise the caller may still hold it; then
//     nobody holds the key.
//   - extend or release → not held (404) or mismatch (412): the caller does
//     not hold the key at t: it is not the holder, or t is past its Sure.
//   - extend → unknown: the lease may have been extended (Maybe becomes
//     unknown); release → unknown: it may have been released (Sure is no
//     longer certain); acquire → unknown, by the holder's token (a twin or
//     a retry of the request that made it the holder): the lease may have
//     been renewed (Maybe becomes unknown). An unknown outcome may take
//     effect after the client stopped waiting (a gateway paused
//     mid-request), and these changes stay true from then on.
//
// Other acquires are left out of the history: 409 says nothing certain (a
// split Redlock vote, a free key promised to a queued waiter), and an
// acquire with an unknown outcome by a token that never held the key can
// only have created a lease whose token nobody uses again, which makes no
// later answer illegal. Leaving them out keeps the search small.
var LeaseModel = porcupine.Model{
	Init: func() any { return leaseState{Sure: math.MinInt64, Maybe: math.MinInt64} },
	Step: func(state, input, output any) (bool, any) {
		return leaseStep(state.(leaseState), input.(leaseInput), output.(leaseOutput))
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(leaseInput), output.(leaseOutput)
		s := fmt.Sprintf("%s(%s) → %s", in.Kind, short(in.Token), out.Result)
		if out.Fence != 0 {
			s += fmt.Sprintf(" fence %d, expires %s", out.Fence, stamp(out.Expires))
		}
		return s
	},
	DescribeState: func(state any) string {
		s := state.(leaseState)
		if s.Holder == "" {
			return fmt.Sprintf("free (last fence %d)", s.Fence)
		}
		return fmt.Sprintf("%s surely until %s, at most until %s, fence %d",
			short(s.Holder), describeTime(s.Sure), describeTime(s.Maybe), s.Fence)
	},
}

func describeTime(ns int64) string {
	switch ns {
	case math.MinInt64:
		return "-"
	case math.MaxInt64:
		return "?"
	}
	return stamp(ns)
}

func leaseStep(s leaseState, in leaseInput, out leaseOutput) (bool, leaseState) {
	lo, hi := max(in.Call, s.At), out.Return
	if lo > hi {
		return false, s
	}
	mine := s.Holder != "" && s.Holder == in.Token
	// gone: the caller does not hold the key at some t in [lo, hi].
	gone := func() (bool, leaseState) {
		t := lo
		if mine {
			t = max(lo, s.Sure+1)
			if t > hi {
				return false, s
			}
			s.Holder, s.Sure, s.Maybe = "", math.MinInt64, math.MinInt64
		}
		s.At = t
		return true, s
	}
	switch {
	case in.Kind == Acquire && out.Result == Granted && mine && lo < s.Maybe:
		// A 201 to the holder's own token while its lease may still be
		// held: a twin sent at once, or a retry, that took part of the
		// nodes itself. It is the same holder; the highest fence counts.
		s.Sure, s.Maybe, s.Fence, s.At = out.Expires, hi+in.TTL+int64(expirySlack), max(s.Fence, out.Fence), lo
		return true, s
	case in.Kind == Acquire && (out.Result == Granted || out.Result == Renewed && !mine):
		// A renewal to a token the model does not know as the holder is
		// a retry whose first attempt took the key unseen (see grants).
		t := lo
		if s.Holder != "" {
			t = max(lo, s.Sure+1)
		}
		if t > hi || out.Fence <= s.Fence {
			return false, s
		}
		return true, leaseState{Holder: in.Token, Sure: out.Expires, Maybe: hi + in.TTL + int64(expirySlack), Fence: out.Fence, At: t}
	case in.Kind == Acquire && out.Result == Renewed,
		in.Kind == Extend && out.Result == Extended:
		if !mine || lo >= s.Maybe {
			return false, s
		}
		s.Sure, s.Maybe, s.At = out.Expires, hi+in.TTL+int64(expirySlack), lo
		return true, s
	case in.Kind == Release && out.Result == Released:
		if !mine || lo >= s.Maybe {
			return false, s
		}
		s.Holder, s.Sure, s.Maybe, s.At = "", math.MinInt64, math.MinInt64, lo
		return true, s
	case out.Result == NotHeld || out.Result == Mismatch:
		return gone()
	case in.Kind == Extend && out.Result == Unknown:
		if mine {
			s.Sure = min(s.Sure, in.Call+in.TTL) // an extension may shorten a lease
			s.Maybe = math.MaxInt64
		}
	case in.Kind == Release && out.Result == Unknown:
		if mine {
			s.Sure = math.MinInt64
		}
	case in.Kind == Acquire && out.Result == Unknown:
		if mine { // a twin or a retry of the holder's may renew it, whenever it lands
			s.Maybe = math.MaxInt64
		}
	}
	s.At = lo
	return true, s
}

// leaseOps is the part of the history the lease model checks (see
// LeaseModel), by key.
func leaseOps(ops []Op) map[string][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	// Tokens that held the key at some point, and those of them that were
	// granted it (a 201): their renewals are not in grants.
	held, granted := map[string]bool{}, map[string]bool{}
	for _, op := range ops {
		if op.Kind == Acquire && (op.Result == Granted || op.Result == Renewed) {
			held[op.Token] = true
			granted[op.Token] = granted[op.Token] || op.Result == Granted
		}
	}
	var others []Op
	for _, op := range ops {
		switch {
		case op.Kind != Acquire:
			if op.Result != Rejected {
				others = append(others, op)
			}
		case op.Result == Renewed && granted[op.Token], // a renewal, not a grant
			op.Result == Unknown && held[op.Token]: // may renew the token's lease unseen
			others = append(others, op)
		}
	}
	for _, op := range append(grants(ops), others...) {
		byKey[op.Key] = append(byKey[op.Key], porcupine.Operation{
			ClientId: op.Client,
			Input:    leaseInput{Kind: op.Kind, Token: op.Token, TTL: int64(op.TTL), Call: op.Call},
			Call:     op.Call,
			Output:   leaseOutput{Result: op.Result, Fence: op.Fence, Expires: op.Expires, Return: op.Return},
			Return:   op.Return,
		})
	}
	for _, h := range byKey {
		slices.SortFunc(h, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	}
	return byKey
}

// CheckLinearizable checks each key's history against LeaseModel and
// reports each key that is not linearizable. A key whose check does not end
// within timeout is listed in inconclusive. When dir is not empty, the
// history of every failing key is drawn there as an HTML page (porcupine's
// visualization), named after name and the key.
func CheckLinearizable(ops []Op, timeout time.Duration, dir, name string) (violations []Violation, inconclusive []string) {
	byKey := leaseOps(ops)
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		res, info := porcupine.CheckOperationsVerbose(LeaseModel, byKey[key], timeout)
		switch res {
		case porcupine.Ok:
			continue
		case porcupine.Unknown:
			inconclusive = append(inconclusive, key)
			continue
		}
		detail := fmt.Sprintf("%d operations are not linearizable as a lease", len(byKey[key]))
		if dir != "" {
			file := filepath.Join(dir, fileName(name+"-"+key)+".html")
			if err := os.MkdirAll(dir, 0o755); err == nil && porcupine.VisualizePath(LeaseModel, info, file) == nil {
				detail += "; see " + file
			}
		}
		violations = append(violations, Violation{Checker: "linearizability", Key: key, Detail: detail})
	}
	return violations, inconclusive
}

func fileName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}
