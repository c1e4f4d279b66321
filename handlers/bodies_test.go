package handlers

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInRangeAsValidator: inRange never passes a body the validator
// refuses, at every boundary of every field, and passes the common ones.
func TestInRangeAsValidator(t *testing.T) {
	for _, l := range []Limits{
		{MaxTTL: 24 * time.Hour, MaxWait: time.Minute},
		{MaxTTL: 50 * time.Millisecond, MaxWait: 0},
	} {
		v := newValidator(l)
		maxTTL, maxWait := l.MaxTTL.Milliseconds(), l.MaxWait.Milliseconds()
		ints := func(bounds ...int64) []*int64 {
			out := []*int64{nil}
			for _, b := range append(bounds, math.MinInt64, math.MaxInt64, -1, 0, 1) {
				for _, n := range []int64{b - 1, b, b + 1} {
					out = append(out, &n)
				}
			}
			return out
		}
		strs := []*string{nil}
		for _, s := range []string{"", "a", "worker-7 on host-3", " ", "~", strings.Repeat("a", 128), strings.Repeat("a", 129),
			"tab\there", "nl\n", "\x7f", "é", strings.Repeat("é", 100), strings.Repeat("é", 129), "\u200b", "\xff"} {
			strs = append(strs, &s)
		}
		for _, ttl := range ints(10, maxTTL) {
			e := extendBody{TTLms: ttl}
			if e.inRange(l) {
				require.NoError(t, v.Struct(&e), "extend ttl_ms %v", deref(ttl))
			}
			for _, wait := range ints(0, maxWait) {
				for _, owner := range strs {
					a := acquireBody{TTLms: ttl, WaitMs: wait, Owner: owner}
					if a.inRange(l) {
						require.NoError(t, v.Struct(&a), "acquire ttl_ms %v wait_ms %v owner %q", deref(ttl), deref(wait), deref(owner))
					}
				}
			}
		}
		ttl, wait, owner := int64(10), int64(0), "worker-1"
		assert.True(t, (&acquireBody{}).inRange(l))
		assert.True(t, (&acquireBody{TTLms: &ttl, WaitMs: &wait, Owner: &owner}).inRange(l))
		assert.True(t, (&extendBody{TTLms: &ttl}).inRange(l))
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
