package aside_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/lockgateway/lockgateway/internal/aside"
)

func TestRunReturnsWhatItRan(t *testing.T) {
	assert.Equal(t, 42, aside.Run(func() int { return 42 }))
}

// A panic aside reaches the caller's goroutine (and the request's
// recoverer), instead of ending the process.
func TestRunPanicsInTheCaller(t *testing.T) {
	assert.PanicsWithValue(t, "boom", func() {
		aside.Run(func() int { panic("boom") })
	})
}
