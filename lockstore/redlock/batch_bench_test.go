package redlock

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRedlockBatchCPU runs acquire+release cycles from 32 goroutines
// over 5 real nodes and reports this process's CPU time per cycle, for
// several batching settings interleaved (A/B/A/B) so that load from
// elsewhere on the machine falls on all of them alike.
func BenchmarkRedlockBatchCPU(b *testing.B) {
	urls := make([]string, 5)
	for i := range urls {
		urls[i] = redistest.Start(b).URL()
	}
	s, err := Open(urls, Options{NodeTimeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	for s.Ping(ctx) != nil {
		time.Sleep(10 * time.Millisecond)
	}
	type cfg struct{ senders, max int }
	// {1 << 20, 1} never queues: every call is its own write, as before
	// batching.
	cfgs := []cfg{{1 << 20, 1}, {script.BatchSenders, script.BatchMax}, {1, script.BatchMax}, {4, script.BatchMax}, {script.BatchSenders, 128}}
	const clients, cycles = 32, 150
	cpu := make([]time.Duration, len(cfgs))
	wall := make([]time.Duration, len(cfgs))
	calls := make([]int64, len(cfgs))
	writes := make([]int64, len(cfgs))
	for round := 0; round < b.N; round++ {
		for ci, c := range cfgs {
			for _, n := range s.nodes {
				n.batch.Mu.Lock()
				n.batch.MaxSenders, n.batch.MaxBatch = c.senders, c.max
				n.batch.Mu.Unlock()
			}
			var w0, c0 int64
			for _, n := range s.nodes {
				w0 += n.batch.Writes.Load()
				c0 += n.batch.Calls.Load()
			}
			start, cpu0 := time.Now(), cpuTime()
			var wg sync.WaitGroup
			for k := range clients {
				wg.Go(func() {
					for i := range cycles {
						key := fmt.Sprintf("b%d-%d-%d", round, k, i)
						l, err := s.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: time.Minute})
						if err != nil {
							b.Error(err)
							return
						}
						if err := s.Release(ctx, key, l.Token); err != nil {
							b.Error(err)
						}
					}
				})
			}
			wg.Wait()
			cpu[ci] += cpuTime() - cpu0
			wall[ci] += time.Since(start)
			for _, n := range s.nodes {
				writes[ci] += n.batch.Writes.Load()
				calls[ci] += n.batch.Calls.Load()
			}
			writes[ci] -= w0
			calls[ci] -= c0
		}
	}
	for ci, c := range cfgs {
		n := float64(b.N * clients * cycles)
		b.Logf("senders=%d max=%d: %.1f µs CPU/cycle, %.0f cycles/s, %.2f calls/write",
			c.senders, c.max, float64(cpu[ci].Microseconds())/n, n/wall[ci].Seconds(), float64(calls[ci])/float64(writes[ci]))
	}
}
