package redlock

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/lockstore"
)

// TestAdmission: rounds are admitted up to the limit and refused beyond it
// with a 503 (none refused at admitMax); a congested round halves the
// limit, at most once per NodeTimeout and never below admitMin; rounds
// that heard their majority grow it back by one per limit's worth, and
// each second without a cut doubles it.
func TestAdmission(t *testing.T) {
	a := newAdmission(50 * time.Millisecond)
	a.limit = 3
	for range 3 {
		require.NoError(t, a.enter())
	}
	err := a.enter()
	require.ErrorIs(t, err, lockstore.ErrUnavailable)
	assert.Contains(t, err.Error(), "did not send this one; retry with the same token")
	assert.EqualValues(t, 1, a.refused, "a refusal is counted, for lockgw_redlock_admission_refused_total")
	a.inflight = 0
	a.limit = admitMax
	for range 2 * admitMax {
		require.NoError(t, a.enter(), "never cut: no limit")
	}
	a.inflight = 3

	now := time.Now()
	a.limit = 64
	a.leave(true, now)
	assert.InDelta(t, 32, a.limit, 0.001, "a congested round halves the limit")
	a.leave(true, now.Add(49*time.Millisecond))
	assert.InDelta(t, 32, a.limit, 0.001, "one stall cuts once: not again within NodeTimeout")
	a.leave(false, now)
	assert.InDelta(t, 32+1.0/32, a.limit, 0.001, "a round that heard its majority grows it by 1/limit")
	assert.Zero(t, a.inflight)

	for i := range 20 {
		a.inflight++
		a.leave(true, now.Add(time.Duration(i+1)*50*time.Millisecond))
	}
	assert.InDelta(t, admitMin, a.limit, 0.001, "never below admitMin")
	for range admitMin {
		require.NoError(t, a.enter())
	}
	require.ErrorIs(t, a.enter(), lockstore.ErrUnavailable)
	assert.EqualValues(t, 2, a.refused)
	for range admitMin {
		a.leave(false, now)
	}
	before := a.limit
	for range 1000 {
		a.inflight++
		a.leave(false, a.lastChange.Add(time.Millisecond))
	}
	// +1/L per round: L² grows by about 2 per round.
	assert.InDelta(t, math.Sqrt(before*before+2*1000), a.limit, 1, "grown by one per limit's worth of rounds")
	calm := a.lastChange
	for i := range 12 {
		a.inflight++
		a.leave(false, calm.Add(time.Duration(i+1)*admitCalm))
	}
	assert.InDelta(t, admitMax, a.limit, 0.001, "doubled for each second without a cut, up to admitMax and no further")
}

// TestCongested: only a round that heard no majority while a call timed
// out is congestion; nodes skipped as down, refusals and a majority that
// answered beside a timeout are not.
func TestCongested(t *testing.T) {
	r := &Store{}
	one := quorums{newQuorumList([]bool{true, true, true})}
	r.quorums.Store(&one)
	timeout := fmt.Errorf("%w: %w", lockstore.ErrUnavailable, context.DeadlineExceeded)
	refused := fmt.Errorf("%w: %w", lockstore.ErrUnavailable, lockstore.ErrRefused)
	votes := func(errs ...error) []nodeResult[int] {
		v := make([]nodeResult[int], len(errs))
		for i, err := range errs {
			v[i] = nodeResult[int]{err: err, counted: true}
		}
		return v
	}
	assert.True(t, congested(r, votes(timeout, timeout, nil)))
	assert.True(t, congested(r, votes(timeout, errNodeDown, nil)))
	assert.False(t, congested(r, votes(timeout, nil, nil)), "a majority answered")
	assert.False(t, congested(r, votes(errNodeDown, errNodeDown, nil)), "down nodes were not asked")
	assert.False(t, congested(r, votes(refused, refused, nil)), "refusals are answers of a kind, not slowness")
	assert.False(t, congested(r, []nodeResult[int](nil)), "a round refused before its votes")
}
