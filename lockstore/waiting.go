package lockstore

import "context"

type waitBegunKey struct{}

// WithWaitBegun returns ctx carrying begun, which an acquire under ctx
// that may wait (AcquireRequest.Wait, PermitRequest.Wait) calls once, on
// its own goroutine, when its first try was not decisive (the key held,
// the semaphore full, or no answer) and it begins to wait; never for an
// acquire its first try decides. A gateway uses it to let the
// connection of a request that waits go from net/http's hands while it
// waits (handlers/park.go). begun must not block.
func WithWaitBegun(ctx context.Context, begun func()) context.Context {
	return context.WithValue(ctx, waitBegunKey{}, begun)
}

// WaitBegun calls the function WithWaitBegun put in ctx, if any: every
// store's waiting loop does, once, before its first pause.
func WaitBegun(ctx context.Context) {
	if begun, ok := ctx.Value(waitBegunKey{}).(func()); ok {
		begun()
	}
}
