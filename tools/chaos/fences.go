package chaos

import (
	"cmp"
	"fmt"
	"slices"
)

// CheckFences reports fences that do not increase in grant order, per key:
// a grant whose request was sent after another grant's answer had arrived
// must carry a higher fence (the guarantee lockstore documents for every
// backend, Redlock's included), and no two grants may share a fence.
// Grants whose requests overlapped in time are not ordered; a re-grant to
// a token that already held the key keeps its fence and is not a new grant
// (see grants).
func CheckFences(ops []Op) []Violation {
	byKey := map[string][]Op{}
	for _, op := range grants(ops) {
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)

	var out []Violation
	for _, key := range keys {
		grants := byKey[key]
		owner := map[int64]Op{}
		for _, g := range grants {
			if prev, dup := owner[g.Fence]; dup && prev.Token != g.Token {
				out = append(out, Violation{Checker: "fences", Key: key, Detail: fmt.Sprintf(
					"fence %d granted twice: to %s at %s and to %s at %s",
					g.Fence, short(prev.Token), stamp(prev.Return), short(g.Token), stamp(g.Return))})
			}
			owner[g.Fence] = g
		}

		// Sweep the grants by call, keeping the highest fence among the
		// grants that had returned before the current call.
		byCall := slices.Clone(grants)
		slices.SortFunc(byCall, func(a, b Op) int { return cmp.Compare(a.Call, b.Call) })
		byReturn := slices.Clone(grants)
		slices.SortFunc(byReturn, func(a, b Op) int { return cmp.Compare(a.Return, b.Return) })
		var best Op
		j := 0
		for _, g := range byCall {
			for j < len(byReturn) && byReturn[j].Return < g.Call {
				if byReturn[j].Fence > best.Fence {
					best = byReturn[j]
				}
				j++
			}
			if best.Token != "" && g.Fence <= best.Fence {
				out = append(out, Violation{Checker: "fences", Key: key, Detail: fmt.Sprintf(
					"fence %d granted to %s (asked at %s) after fence %d had been granted to %s (answered at %s)",
					g.Fence, short(g.Token), stamp(g.Call), best.Fence, short(best.Token), stamp(best.Return))})
			}
		}
	}
	return out
}
