package server

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestResolveMaxLocks: the memory backend's automatic bound follows the
// memory limit within its clamps; other backends keep no locks.
func TestResolveMaxLocks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		limit int64
		want  int
	}{
		{"256 MiB container", Config{Backend: BackendMemory}, 256 << 20 * 9 / 10, 29_491},
		{"small limit", Config{Backend: BackendMemory}, 4 << 20, minLocks},
		{"large machine", Config{Backend: BackendMemory}, 21 << 30, maxAutoLocks},
		{"no limit", Config{Backend: BackendMemory}, math.MaxInt64, maxAutoLocks},
		{"set by hand", Config{Backend: BackendMemory, MaxLocks: 5}, 256 << 20, 5},
		{"redis", Config{Backend: BackendRedis}, 256 << 20, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, resolveMaxLocks(tc.cfg, tc.limit))
		})
	}
}
