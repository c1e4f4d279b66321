package lockstore

import (
	"context"
)

// BatchSemExtender is Semaphores that extend many permits in one call to
// the backend (a pipeline), as BatchExtender does leases: holds of permits
// renewing together cost one round trip rather than one each. Each
// Extension (TTL 0: the permit's own length; User unused) fails or
// succeeds as SemExtend would; results are in the order of exts.
type BatchSemExtender interface {
	SemExtendBatch(ctx context.Context, exts []Extension) []SemExtended
}

// SemExtended is one permit Extension's outcome.
type SemExtended struct {
	Permit Permit
	Err    error
}

// SemExtendAll extends exts' permits through s: in one batch when s is a
// BatchSemExtender, else each with SemExtend, all at once (Memory, whose
// calls cost no round trip).
func SemExtendAll(ctx context.Context, s Semaphores, exts []Extension) []SemExtended {
	return extendAll(ctx, s, exts, BatchSemExtender.SemExtendBatch, extendPermit(s))
}

// SemExtendEach runs s.SemExtend for exts[i], for every i in which (all
// when which is nil), at once: what a BatchSemExtender does for the
// extensions it does not batch.
func SemExtendEach(ctx context.Context, s Semaphores, exts []Extension, out []SemExtended, which []int) {
	extendEach(ctx, exts, out, which, extendPermit(s))
}

// extendPermit is s.SemExtend of one Extension (its User unused).
func extendPermit(s Semaphores) func(context.Context, Extension) SemExtended {
	return func(ctx context.Context, e Extension) SemExtended {
		p, err := s.SemExtend(ctx, e.Key, e.Token, e.TTL)
		return SemExtended{Permit: p, Err: err}
	}
}
