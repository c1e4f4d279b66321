package handlers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestSpread: a renewal is asked for at most an eighth early, never late,
// and holds answered together are asked for at different times.
func TestSpread(t *testing.T) {
	const d = 1600 * time.Millisecond
	seen := map[time.Duration]bool{}
	for range 1000 {
		got := spread(d)
		assert.LessOrEqual(t, got, d)
		assert.GreaterOrEqual(t, got, d-d/8)
		seen[got] = true
	}
	assert.Greater(t, len(seen), 900, "spread out")
	assert.Equal(t, time.Duration(0), spread(0))
}
