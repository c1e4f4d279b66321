package lockstore

// aside runs f on a goroutine of its own and returns what it returned.
//
// A waiting acquire parks its request's goroutine for as long as it waits,
// and a goroutine keeps the largest stack it ever needed: a go-redis call
// (the script, its pipeline, the reply's parsing) takes the stack of the
// request's goroutine past 8 KiB, to 16 KiB, and the garbage collector
// shrinks it back only when less than a quarter of it is in use, which a
// request parked under net/http's and the middlewares' frames never is.
// Run aside, those deep frames live on a short-lived goroutine whose stack
// goes back to the runtime when it returns, so the parked one stays at
// 8 KiB: 8 KiB less per waiter, 80 MiB at 10 000 waiters (issue 17), for
// a goroutine start (about a microsecond) per Redis call of a wait. The
// caller waits for f whatever happens, so its outcome is never lost, and
// a panic in f is raised again in the caller, where the request's
// recoverer is.
func aside[T any](f func() T) T {
	type outcome struct {
		v        T
		panicked bool
		p        any
	}
	done := make(chan outcome, 1)
	go func() {
		o := outcome{panicked: true}
		defer func() {
			if o.panicked {
				o.p = recover()
			}
			done <- o
		}()
		o.v = f()
		o.panicked = false
	}()
	o := <-done
	if o.panicked {
		panic(o.p)
	}
	return o.v
}
