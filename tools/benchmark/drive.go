package main

import (
	"context"
	"errors"
	"math"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/lockgateway/lockgateway/internal/sleep"
)

// measurement is what one row's load produced in its measured window.
type measurement struct {
	count     int             // cycles completed in the window
	window    time.Duration   // the window's length
	latencies []time.Duration // one per counted cycle
	handoffs  []time.Duration // release sent → next grant received
	errors    map[string]int  // by kind, in the window
	total     int64           // successful cycles including the warm-up
	// redisCalls are the commands the rows' one redis-server ran from
	// before the warm-up to after the drain, by name (onRedis rows only).
	redisCalls map[string]int64
}

// drive runs every client in its own goroutine for warmup+window. Only
// cycles that end inside the window count. Cycles still running when it
// closes may finish, uncounted, for up to drain: cutting off a waiting
// acquire would measure how a server copes with abandoned waiters, not
// its speed (and etcd 3.4 copes badly: once 31 blocked /v3/lock/lock
// calls had been cut off, it granted no further lock, on any name, for the
// rest of the run).
func drive(ctx context.Context, clients []client, warmup, window, drain time.Duration) measurement {
	start := time.Now()
	from, to := start.Add(warmup), start.Add(warmup+window)
	stop, cancelStop := context.WithDeadline(ctx, to) // no new cycles
	defer cancelStop()
	runCtx, cancel := context.WithDeadline(ctx, to.Add(drain)) // cut off
	defer cancel()

	type workerResult struct {
		latencies        []time.Duration
		grants, releases []time.Time
		errors           map[string]int
		total            int64
	}
	results := make([]workerResult, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			pprof.Do(runCtx, pprof.Labels("role", "load"), func(ctx context.Context) {
				w := &results[i]
				w.errors = map[string]int{}
				for stop.Err() == nil {
					r, err := c.cycle(ctx)
					now := time.Now()
					if ctx.Err() != nil || !now.Before(to) {
						// Ended after the window, or cut off (a deadline
						// can fire on a connection before on ctx).
						return
					}
					// Every grant and release counts for handoffs, even
					// outside the window: they are what the next grant
					// is measured from.
					if !r.granted.IsZero() {
						w.grants = append(w.grants, r.granted)
					}
					if !r.releasing.IsZero() {
						w.releases = append(w.releases, r.releasing)
					}
					if err != nil {
						if !now.Before(from) {
							w.errors[errorKind(err)]++
						}
						// A failing target must not turn the client
						// into a busy loop.
						sleep.For(ctx, 10*time.Millisecond)
						continue
					}
					w.total++
					if !now.Before(from) && now.Before(to) {
						w.latencies = append(w.latencies, r.latency)
					}
				}
			})
		})
	}
	wg.Wait()

	m := measurement{window: window, errors: map[string]int{}}
	var grants, releases []time.Time
	for _, w := range results {
		m.latencies = append(m.latencies, w.latencies...)
		grants = append(grants, w.grants...)
		releases = append(releases, w.releases...)
		for k, n := range w.errors {
			m.errors[k] += n
		}
		m.total += w.total
	}
	m.count = len(m.latencies)
	m.handoffs = handoffs(grants, releases, from, to)
	return m
}

// add merges another window of the same row into m.
func (m *measurement) add(o measurement) {
	m.count += o.count
	m.window += o.window
	m.latencies = append(m.latencies, o.latencies...)
	m.handoffs = append(m.handoffs, o.handoffs...)
	if m.errors == nil {
		m.errors = map[string]int{}
	}
	for k, n := range o.errors {
		m.errors[k] += n
	}
	m.total += o.total
	for k, n := range o.redisCalls {
		if m.redisCalls == nil {
			m.redisCalls = map[string]int64{}
		}
		m.redisCalls[k] += n
	}
}

// handoffs pairs each grant received in [from, to) with the latest release
// sent before it. Meaningful only when all clients share one key: a grant
// then always follows the release that freed the key.
func handoffs(grants, releases []time.Time, from, to time.Time) []time.Duration {
	slices.SortFunc(grants, time.Time.Compare)
	slices.SortFunc(releases, time.Time.Compare)
	var out []time.Duration
	for _, g := range grants {
		if g.Before(from) || !g.Before(to) {
			continue
		}
		// The first release at or after g; the one before it freed g's key.
		i, _ := slices.BinarySearchFunc(releases, g, time.Time.Compare)
		if i == 0 {
			continue
		}
		out = append(out, g.Sub(releases[i-1]))
	}
	return out
}

func errorKind(err error) string {
	if se, ok := errors.AsType[*statusError](err); ok {
		if se.body != "" && len(se.body) < 40 {
			return se.Error()
		}
		return (&statusError{op: se.op, status: se.status}).Error()
	}
	s := err.Error()
	if len(s) > 100 {
		s = s[:100] + "…"
	}
	return s
}

// percentile is the nearest-rank percentile of sorted durations, in
// milliseconds; NaN when there are none.
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	i = min(max(i, 0), len(sorted)-1)
	return ms(sorted[i])
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
