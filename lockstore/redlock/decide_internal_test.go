package redlock

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/lockgateway/lockgateway/lockstore"
)

// TestDecideDuringATransition: found by make chaos (nodeset-transition,
// the lease linearizability check). Nodes a, b, c, d; the old list O is
// {a, b, c}, the new one N is {a, b, d}. After the finish a new-list
// gateway granted a lease on {b, d}, a majority of N. A transition
// gateway that had not yet seen the finish extended it: b and d extended
// it, a and c carried another token's value (a provisional one, or a
// leftover of O): a majority of O. It answered 412 (another token holds
// the key) to the holder of a lease that it holds, which then released it
// (204). While the token holds a majority of some list, no other token
// holds a majority of that list: the answer is 503 (the extend could not
// reach a majority of every list), never "another holds it".
func TestDecideDuringATransition(t *testing.T) {
	o := newQuorumList([]bool{true, true, true, false})
	n := newQuorumList([]bool{true, true, false, true})
	r := &Store{}
	both := quorums{o, n}
	r.quorums.Store(&both)
	tally := ownedTally[struct{}]{
		okAt:       []bool{false, true, false, true},
		mismatchAt: []bool{true, false, true, false},
		unknownAt:  make([]bool, 4),
		forcedAt:   make([]bool, 4),
	}
	err := tally.decide(r)
	assert.ErrorIs(t, err, lockstore.ErrUnavailable)
	assert.NotErrorIs(t, err, lockstore.ErrTokenMismatch, "the token holds a majority of N")

	// With the token on no majority of any list, a majority of O held by
	// another is still the other's.
	tally.okAt = []bool{false, true, false, false}
	assert.ErrorIs(t, tally.decide(r), lockstore.ErrTokenMismatch)

	// One list: a majority of it cannot be both the token's and another's;
	// the answers are as before.
	one := quorums{newQuorumList([]bool{true, true, true})}
	r.quorums.Store(&one)
	single := ownedTally[struct{}]{okAt: []bool{true, false, false}, mismatchAt: []bool{false, true, true},
		unknownAt: make([]bool, 3), forcedAt: make([]bool, 3)}
	assert.ErrorIs(t, single.decide(r), lockstore.ErrTokenMismatch)
}
