package lockstore

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A lease the token released keeps a copy on a node its release missed;
// after four take-overs that copy's field is pinned to the last round that
// took it over. The next round W of the token, re-granted on that copy and
// granted anew on the other two nodes above a holder granted in between,
// must not read the pinned copy as a value it made (docs/safety.md, "Fences
// of twins", stale copies): the Redlock simulator found W answer the old
// fence, 188, below that holder's 189.
func TestPickFenceIgnoresPinnedMaker(t *testing.T) {
	votes := []fenceVote{
		{fence: 188, renewed: true, maker: makerOf("~!W"), confirmed: true}, // the stale copy
		{fence: 190, maker: makerOf("~W")},
		{fence: 190, maker: makerOf("~W")},
	}
	fence, kept := pickFence(votes, 2)
	assert.Equal(t, int64(190), fence)
	assert.False(t, kept)
	assert.Equal(t, "", makerOf("~!W"), "a pinned value has no maker")
	assert.Equal(t, "x", makerOf("~x.y.z"), "the first round of the field made it")
}
