package redlock

import (
	"testing"

	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/stretchr/testify/assert"
)

// A lease the token released keeps a copy on a node its release missed,
// confirmed with the old fence. The next round of the token, granted anew
// on the other two nodes above a holder granted in between, must take the
// highest fence, not the copy's: the copy is confirmed on one node, never
// on a majority (docs/safety.md, "Fences and retries", stale copies).
func TestRoundFenceIgnoresStaleCopy(t *testing.T) {
	three := quorums{newQuorumList([]bool{true, true, true})}
	values := []roundValue{
		{has: true, counted: true, fence: 188, confirmed: true, maker: script.MakerOf("~V")}, // the stale copy
		{has: true, counted: true, fence: 190, maker: script.MakerOf("~W")},
		{has: true, counted: true, fence: 190, maker: script.MakerOf("~W")},
	}
	fence, renewal := roundFence(values, three)
	assert.Equal(t, int64(190), fence)
	assert.False(t, renewal)

	// Two confirmed copies of one fence are a majority of three: a renewal.
	values[1].fence, values[1].confirmed = 188, true
	fence, renewal = roundFence(values, three)
	assert.Equal(t, int64(188), fence)
	assert.True(t, renewal)

	// A node that does not count is no vote.
	values[1].counted = false
	_, renewal = roundFence(values, three)
	assert.False(t, renewal)

	// A floor (a permit's value older than its node knows, R3) lifts a new
	// grant's fence, not a renewal's.
	values[1].counted = true
	values[2].floor = 195
	fence, renewal = roundFence(values, three)
	assert.Equal(t, int64(188), fence)
	assert.True(t, renewal)
	values[1].confirmed = false
	fence, renewal = roundFence(values, three)
	assert.Equal(t, int64(195), fence)
	assert.False(t, renewal)

	assert.Equal(t, "", script.MakerOf("~!W"), "an older gateway's pinned value has no maker")
	assert.Equal(t, "x", script.MakerOf("~x.y.z"), "the first round of an older gateway's field made it")
	assert.Equal(t, "x", script.MakerOf("~x"))
}

// TestConfirmRoundRenewalDespiteOwnEqualVote: the token's permit (or lease)
// is confirmed on a majority by an earlier call's round E; this call's
// round x makes new provisional values on the other nodes, one of them by
// chance with the same fence (a node's counter + 1). The round is a
// renewal: x's own provisional value does not make it this call's new
// grant. Before, it did, and a permit was answered 201 with E's fence,
// below a holder answered in between (the simulator, seed 2280).
func TestConfirmRoundRenewalDespiteOwnEqualVote(t *testing.T) {
	r := &Store{}
	five := quorums{newQuorumList([]bool{true, true, true, true, true})}
	r.quorums.Store(&five)
	const old, later = 100, 200
	values := []roundValue{
		{has: true, counted: true, fence: old, confirmed: true, maker: "E", floor: later + 1},
		{has: true, counted: true, fence: old, confirmed: true, maker: "E", floor: later + 1},
		{has: true, counted: true, fence: later + 7, maker: "x"},
		{has: true, counted: true, fence: old, maker: "x"}, // x's vote, by chance E's fence
		{has: true, counted: true, fence: old, confirmed: true, maker: "E"},
	}
	g := r.confirmRound(t.Context(), values, []string{"x"}, nil)
	assert.True(t, g.renewal, "the permit E confirmed on a majority, renewed: 200")
	assert.Equal(t, int64(old), g.fence)

	// When x itself had confirmed it (an earlier round of this call), it is
	// the call's new grant.
	for i := range values {
		if values[i].confirmed {
			values[i].maker = "x"
		}
	}
	g = r.confirmRound(t.Context(), values, []string{"x"}, nil)
	assert.False(t, g.renewal, "confirmed by this call's own earlier round: 201")
}
