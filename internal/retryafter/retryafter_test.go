package retryafter_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/lockgateway/lockgateway/internal/retryafter"
)

func TestSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{-time.Second, 1},
		{0, 1},
		{time.Millisecond, 1},
		{time.Second, 1},
		{time.Second + time.Millisecond, 2},
		{90 * time.Second, 90},
	} {
		assert.Equal(t, tc.want, retryafter.Seconds(tc.d), "%v", tc.d)
	}
}
