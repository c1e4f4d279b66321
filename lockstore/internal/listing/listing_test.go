package listing

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSmallest(t *testing.T) {
	s := NewSmallest(3)
	for _, k := range []string{"e", "b", "d", "b", "a", "f", "c"} {
		s.Offer(k)
	}
	assert.Equal(t, []string{"a", "b", "c"}, s.Keys)
	assert.True(t, s.Full())
	keys, next := Page([]string{"a", "b", "c"}, 2)
	assert.Equal(t, []string{"a", "b"}, keys)
	assert.Equal(t, "b", next)
	keys, next = Page([]string{"a", "b"}, 2)
	assert.Equal(t, []string{"a", "b"}, keys)
	assert.Empty(t, next)
}
