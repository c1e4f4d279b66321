package chaos

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// CheckPermits both ways: two permits at once under limit 2, a release that
// ends a holding, an extension that merges with its own grant, and
// back-to-back holdings are fine; a third holder at once is caught, once
// per excursion.
func TestCheckPermits(t *testing.T) {
	ok := []Op{
		grant(0, "A", 0, 1, 10, 100),
		grant(1, "B", 0, 2, 11, 100),
		release(0, "A", 50, 51, Released),
		grant(2, "C", 40, 52, 12, 150), // from 52: A let go at 50
		extend(1, "B", 60, 61, Extended, 160),
		grant(3, "D", 140, 160, 13, 300), // from 160: B's until 160, C's until 150
	}
	v, most := CheckPermits(ok, 2)
	assert.Empty(t, v)
	assert.Equal(t, 2, most)

	bad := append(ok, grant(4, "E", 0, 55, 14, 70)) // with B and C, 55–70
	v, most = CheckPermits(bad, 2)
	require.Len(t, v, 1, "%v", v)
	assert.Equal(t, "permits", v[0].Checker)
	assert.Contains(t, v[0].Detail, "3 holders")
	assert.Equal(t, 3, most)
	v, _ = CheckPermits(bad, 3)
	assert.Empty(t, v, "limit 3 allows it")

	twice := append(ok, grant(4, "E", 300, 310, 13, 400)) // D's fence
	v, _ = CheckPermits(twice, 2)
	require.Len(t, v, 1, "%v", v)
	assert.Contains(t, v[0].Detail, "fence 13 granted to D and to E")
}
