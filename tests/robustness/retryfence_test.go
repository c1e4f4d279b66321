package chaos_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/lockgateway/lockgateway/tools/chaos"
)

// checkRetryFences checks what docs/api.md ("Safe retries") promises a
// same-token PUT about its fence; what it finds is counted as "fences":
//
//   - a sequential retry (sent after an earlier PUT of its token was
//     answered 201 or 200 with fence F, before that answer's expires_at,
//     with no DELETE or failed PATCH of the token in between) that is
//     granted answers F;
//   - every granted PUT, twins included, answers a fence above that of
//     every other token's grant answered before it was sent, and below
//     that of every other token's grant sent after it was answered.
//
// chaos.CheckFences orders grants only (a 200 to a token already granted
// is no new grant there); this looks at every answer.
func checkRetryFences(ops []chaos.Op) []chaos.Violation {
	byKey := map[string][]chaos.Op{}
	for _, op := range ops {
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	held := func(op chaos.Op) bool {
		return op.Kind == chaos.Acquire && (op.Result == chaos.Granted || op.Result == chaos.Renewed)
	}
	var out []chaos.Violation
	for _, key := range keys {
		kops := byKey[key]
		for _, first := range kops {
			if !held(first) {
				continue
			}
			for _, retry := range kops {
				if !held(retry) || retry.Token != first.Token || retry.Call <= first.Return || retry.Call >= first.Expires ||
					retry.Fence == first.Fence {
					continue
				}
				// A release, or an extend that found the lease gone, between
				// the two lets the retry be a new grant.
				broken := false
				for _, op := range kops {
					if op.Token == first.Token && op.Call < retry.Call && op.Return > first.Call &&
						(op.Kind == chaos.Release || op.Kind == chaos.Extend && op.Result != chaos.Extended) {
						broken = true
						break
					}
				}
				if !broken {
					out = append(out, chaos.Violation{Checker: "fences", Key: key, Detail: fmt.Sprintf(
						"retry: %s answered fence %d at %s; the same token's PUT sent at %s, while that lease held, answered fence %d",
						short(first.Token), first.Fence, stamp(first.Return), stamp(retry.Call), retry.Fence)})
				}
			}
			for _, other := range kops {
				if !held(other) || other.Token == first.Token {
					continue
				}
				if other.Return < first.Call && other.Fence >= first.Fence {
					out = append(out, chaos.Violation{Checker: "fences", Key: key, Detail: fmt.Sprintf(
						"same-token answer: %s answered fence %d (sent at %s), not above %s's fence %d answered at %s",
						short(first.Token), first.Fence, stamp(first.Call), short(other.Token), other.Fence, stamp(other.Return))})
				}
			}
		}
	}
	return out
}

func short(token string) string { return token[:min(6, len(token))] }

func stamp(ns int64) string { return time.Unix(0, ns).UTC().Format("15:04:05.000000") }

// TestCheckRetryFences: the checker catches a sequential retry answered
// another fence (hole 3 of issue 26) and a twin below an earlier holder,
// and passes twins of one lease answered two fences within the bounds.
func TestCheckRetryFences(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	op := func(token string, call, ret int64, res chaos.Result, fence int64) chaos.Op {
		return chaos.Op{Key: "s", Kind: chaos.Acquire, Token: token, Call: ms(call), Return: ms(ret), Result: res, Fence: fence, Expires: ms(ret + 1000)}
	}
	// H's grant, then a sequential retry answered a higher fence.
	v := checkRetryFences([]chaos.Op{op("H", 0, 10, chaos.Granted, 100), op("H", 500, 510, chaos.Renewed, 105)})
	assert.Len(t, v, 1)
	// The same retry after a release is a new grant: no promise.
	rel := chaos.Op{Key: "s", Kind: chaos.Release, Token: "H", Call: ms(100), Return: ms(110), Result: chaos.Released}
	assert.Empty(t, checkRetryFences([]chaos.Op{op("H", 0, 10, chaos.Granted, 100), rel, op("H", 500, 510, chaos.Granted, 105)}))
	// Twins answered two fences, both above the earlier holder's: allowed.
	assert.Empty(t, checkRetryFences([]chaos.Op{
		op("A", 0, 10, chaos.Granted, 50), op("H", 2000, 2020, chaos.Granted, 100), op("H", 2001, 2019, chaos.Renewed, 103),
	}))
	// A twin answered below the earlier holder's fence: caught.
	assert.Len(t, checkRetryFences([]chaos.Op{
		op("A", 0, 10, chaos.Granted, 50), op("H", 2000, 2020, chaos.Granted, 100), op("H", 2001, 2019, chaos.Renewed, 40),
	}), 1)
}
