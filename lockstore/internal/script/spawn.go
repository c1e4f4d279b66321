package script

import (
	"time"

	"github.com/panjf2000/ants/v2"
)

// Go runs f on a goroutine of its own, one that ran such calls before when
// one is idle. A node call goes deep into go-redis: on a fresh goroutine
// its stack grows from 2 KiB, copied at every doubling, and that copying
// was a tenth of a Redlock gateway's CPU (issue #30's profile). A worker
// whose stack has grown keeps it for the next call. Go never waits for a
// worker: with none idle it starts one (the pool has no size limit), so a
// call is never queued behind another.
func Go(f func()) {
	if workers.Submit(f) != nil {
		go f() // not expected: the pool is never released
	}
}

// A worker idle for workerIdle ends, so a burst's workers do not outlive it
// for long.
const workerIdle = 10 * time.Second

var workers = func() *ants.Pool {
	p, err := ants.NewPool(-1, ants.WithExpiryDuration(workerIdle))
	if err != nil {
		panic(err) // only for invalid options
	}
	return p
}()
