// Package sleep waits for a while unless a context ends first: the one
// timer every pause between retries and every paced loop goes through, so
// none leaks a timer or outlives its context.
package sleep

import (
	"context"
	"time"
)

// For waits d or until ctx ends, and reports whether it waited d (with d ≤ 0,
// whether ctx is still live).
func For(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Until waits d, or until wake receives (woken), or until ctx ends; ok
// reports whether ctx is still live. It is the one wait of every loop that
// sleeps until it is told (a waiter's notification, a watched key's signal)
// or until a deadline of its own.
func Until(ctx context.Context, d time.Duration, wake <-chan struct{}) (woken, ok bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-wake:
		return true, true
	case <-t.C:
		return false, true
	case <-ctx.Done():
		return false, false
	}
}
