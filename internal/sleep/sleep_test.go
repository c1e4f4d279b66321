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

func TestUntil(t *testing.T) {
	wake := make(chan struct{}, 1)
	woken, ok := sleep.Until(t.Context(), time.Millisecond, wake)
	assert.True(t, ok)
	assert.False(t, woken, "the time ran out")

	wake <- struct{}{}
	woken, ok = sleep.Until(t.Context(), time.Hour, wake)
	assert.True(t, ok)
	assert.True(t, woken, "told before the hour")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, ok = sleep.Until(ctx, time.Hour, wake)
	assert.False(t, ok, "an ended context ends the wait")
}
