package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/client"
	"github.com/lockgateway/lockgateway/internal/apitest"
)

// TestQuotaExceeded: a user at its cap gets ErrQuotaExceeded at once, even
// with a wait, with RetryAfter until its earliest lock expires.
func TestQuotaExceeded(t *testing.T) {
	g := apitest.Start(t, map[string]string{"LOCKGW_BACKEND": "memory", "LOCKGW_MAX_LOCKS_PER_USER": "1"})
	c := newClient(t, g.URL)
	_, err := c.Acquire(t.Context(), "quota/a", client.AcquireOptions{TTL: 20 * time.Second})
	require.NoError(t, err)

	start := time.Now()
	_, err = c.Acquire(t.Context(), "quota/b", client.AcquireOptions{TTL: time.Second, Wait: 5 * time.Second})
	require.ErrorIs(t, err, client.ErrQuotaExceeded)
	assert.NotErrorIs(t, err, client.ErrRateLimited)
	assert.Less(t, time.Since(start), 2*time.Second, "not retried: waiting does not free a place")
	var e *client.Error
	require.True(t, errors.As(err, &e))
	assert.Equal(t, "quota-exceeded", e.Type)
	assert.InDelta(t, 20, e.RetryAfter.Seconds(), 1, "until the first lock expires")
}
