package lockstore

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAsideReturnsWhatItRan(t *testing.T) {
	assert.Equal(t, 42, aside(func() int { return 42 }))
}

// A panic aside reaches the caller's goroutine (and the request's
// recoverer), instead of ending the process.
func TestAsidePanicsInTheCaller(t *testing.T) {
	assert.PanicsWithValue(t, "boom", func() {
		aside(func() int { panic("boom") })
	})
}
