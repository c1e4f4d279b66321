// Package aside runs a call on a short-lived goroutine, so that the deep
// frames it needs do not stay in the stack of a goroutine that parks for a
// long time afterwards.
//
// A goroutine keeps the largest stack it ever needed: a go-redis call (the
// script, its pipeline, the reply's parsing) takes a request's goroutine
// past 8 KiB, to 16 KiB, and the garbage collector shrinks a stack back
// only when less than a quarter of it is in use, which a request parked
// under net/http's and the middlewares' frames (about 4 KiB) never is. Run
// aside, those frames live on a goroutine whose stack goes back to the
// runtime when it returns, and the parked one stays at 8 KiB: 8 KiB less
// per waiting acquire (lockstore, issue 17) and per hold (handlers), for a
// goroutine start (about a microsecond) per call.
package aside

// Run runs f on a goroutine of its own and returns what it returned. The
// caller waits for f whatever happens, so its outcome is never lost, and a
// panic in f is raised again in the caller, where the request's recoverer
// is.
func Run[T any](f func() T) T {
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
