package lockstore

import (
	"context"
)

// SemLister lists the semaphores with permits held whose keys start with
// a prefix, in key order, a page at a time, as Lister lists locks and at
// the same cost (one pass over the keys held per page, see Lister).
type SemLister interface {
	ListSemaphores(ctx context.Context, q ListQuery) (SemPage, error)
}

// ListedSemaphore is one semaphore in a page: its state as SemInspect
// reports it (never a token), and how many callers wait for a permit.
type ListedSemaphore struct {
	SemaphoreState
	// Waiters is the number of callers in the key's wait queue (Memory,
	// Redis); Redlock waits without a queue, so 0.
	Waiters int
}

// SemPage is one page of a listing of semaphores; Next as in ListPage.
type SemPage struct {
	Items []ListedSemaphore
	Next  string
}
