package sleep_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/lockgateway/lockgateway/internal/sleep"
)

func TestFor(t *testing.T) {
	assert.True(t, sleep.For(t.Context(), time.Millisecond), "waited")
	assert.True(t, sleep.For(t.Context(), 0), "nothing to wait, context live")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.False(t, sleep.For(ctx, time.Hour), "an ended context ends the wait")
	assert.False(t, sleep.For(ctx, 0))
}
