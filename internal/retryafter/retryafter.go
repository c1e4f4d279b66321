// Package retryafter turns a wait into the whole seconds a Retry-After (or
// RateLimit) header carries, with one rounding for every response.
package retryafter

import (
	"math"
	"time"
)

// Seconds rounds d up to whole seconds, at least 1: a client told "0"
// would retry at once, before the lease it waits for can have gone.
func Seconds(d time.Duration) int { return max(1, int(math.Ceil(d.Seconds()))) }
