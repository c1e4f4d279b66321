package handlers

// aside runs f on a goroutine of its own and returns what it returned, as
// lockstore's aside does for a waiting acquire's Redis calls.
//
// A hold parks its request's goroutine for as long as its stream is open,
// and a goroutine keeps the largest stack it ever needed: the acquire
// (go-redis: the script, its pipeline, the reply's parsing) takes it past
// 8 KiB, to 16 KiB, and the collector halves a stack only when less than
// a quarter of it is in use, which a hold parked under net/http's and the
// middlewares' frames (about 3.9 KiB) never is of 16 KiB. So a hold's
// acquire and its first event run aside, on a short-lived goroutine whose
// stack goes back to the runtime when it returns, and the parked one stays
// at 8 KiB: 8 KiB less per hold, for a goroutine start per hold. The
// caller waits for f whatever happens, and a panic in f is raised again in
// the caller, where the request's recoverer is.
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
