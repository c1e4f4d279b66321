package aside_test

import (
	"runtime"
	"testing"

	"github.com/lockgateway/lockgateway/internal/aside"
)

// deep uses about 13 KiB of stack, as a go-redis call does (the script,
// its pipeline, the reply's parsing): 49 frames of a little over 256 bytes.
//
//go:noinline
func deep(n int) int {
	var frame [256]byte
	frame[n%len(frame)] = byte(n)
	if n == 0 {
		return int(frame[0])
	}
	return deep(n-1) + int(frame[n%len(frame)])
}

func deepCall() int { return deep(48) }

// A call aside whose f needs a go-redis call's stack: on a goroutine of
// its own, the stack grows (copying it) from its start to 16 KiB at every
// call.
func BenchmarkRunDeep(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		aside.Run(deepCall)
	}
}

// The same with 32 callers at once, as in the contended benchmark (32
// clients waiting on one key).
func BenchmarkRunDeepParallel(b *testing.B) {
	b.ReportAllocs()
	b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			aside.Run(deepCall)
		}
	})
}

// A call aside that needs no stack: what the hand-over itself costs.
func BenchmarkRunShallow(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		aside.Run(func() int { return 1 })
	}
}
