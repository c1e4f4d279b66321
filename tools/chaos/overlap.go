package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// holding is a stretch of time during which a client believed its token
// held a key.
type holding struct {
	token       string
	fence       int64
	from, until int64
}

// holdings turns the history into the stretches each client believed it
// held its lock, by key.
//
// A grant or an extension that reached the client at r with expires_at E
// gives [r, E): not from the call, since a call can start while another
// token holds the key and win after it was released, and not past E, which
// the gateway computed conservatively (for Redlock, less the drift
// allowance). The client stops believing when it sends the release, so
// every stretch of a token ends no later than the call of the first release
// of that token sent after the stretch's own request was (a client may
// release a key and take it again with the same token: a release sent
// before the re-acquire does not end the new lease, whenever it takes
// effect). An extension sent at c with a TTL t may shorten the lease to
// c+t; earlier stretches end there too (the workloads never shorten a
// lease, but the checker does not rely on it).
func holdings(ops []Op) map[string][]holding {
	type lease struct {
		stretches []holding
	}
	leases := map[string]*lease{}
	keys := map[string]string{}
	get := func(op Op) *lease {
		l := leases[op.Token]
		if l == nil {
			l = &lease{}
			leases[op.Token] = l
			keys[op.Token] = op.Key
		}
		return l
	}
	ops = slices.Clone(ops)
	slices.SortStableFunc(ops, func(a, b Op) int { return cmp.Compare(a.Call, b.Call) })
	for _, op := range ops {
		switch {
		case op.Result == Granted || op.Result == Renewed || op.Result == Extended:
			l := get(op)
			l.stretches = append(l.stretches, holding{token: op.Token, fence: op.Fence, from: op.Return, until: op.Expires})
		}
		switch op.Kind {
		case Release:
			// Ops are in call order: the stretches recorded so far are
			// those whose requests were sent before this release.
			l := get(op)
			for i := range l.stretches {
				l.stretches[i].until = min(l.stretches[i].until, op.Call)
			}
		case Extend:
			l := get(op)
			// Earlier stretches only: this extension's own stretch, if
			// any, starts after its call and ends at its own expires_at.
			for i := range l.stretches {
				if l.stretches[i].from < op.Call {
					l.stretches[i].until = min(l.stretches[i].until, op.Call+int64(op.TTL))
				}
			}
		}
	}
	out := map[string][]holding{}
	for token, l := range leases {
		for _, s := range l.stretches {
			if s.from < s.until {
				out[keys[token]] = append(out[keys[token]], s)
			}
		}
	}
	return out
}

// CheckOverlap reports every pair of tokens that believed they held the
// same key at the same time.
func CheckOverlap(ops []Op) []Violation {
	var out []Violation
	byKey := holdings(ops)
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		hs := byKey[key]
		slices.SortFunc(hs, func(a, b holding) int { return cmp.Compare(a.from, b.from) })
		// The two stretches that end last among those seen so far, of two
		// different tokens: a new stretch overlaps some other token's
		// stretch exactly when it starts before the later of them that is
		// not its own.
		var first, second holding
		seen := map[[2]string]bool{}
		for _, h := range hs {
			other := first
			if other.token == h.token {
				other = second
			}
			if other.token != "" && h.from < other.until {
				pair := [2]string{min(other.token, h.token), max(other.token, h.token)}
				if !seen[pair] {
					seen[pair] = true
					out = append(out, Violation{Checker: "overlap", Key: key, Detail: fmt.Sprintf(
						"token %s (fence %d) held it until %s, token %s (fence %d) from %s: %v of overlap",
						short(other.token), other.fence, stamp(other.until), short(h.token), h.fence, stamp(h.from),
						time.Duration(min(other.until, h.until)-h.from))})
				}
			}
			switch {
			case h.token == first.token:
				if h.until > first.until {
					first = h
				}
			case h.token == second.token:
				if h.until > second.until {
					second = h
				}
			case h.until > second.until:
				second = h
			}
			if second.until > first.until {
				first, second = second, first
			}
		}
	}
	return out
}
