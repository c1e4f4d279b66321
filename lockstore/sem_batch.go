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
// calls cost no round trip; Redlock, which extends each on every node).
func SemExtendAll(ctx context.Context, s Semaphores, exts []Extension) []SemExtended {
	if b, ok := s.(BatchSemExtender); ok {
		return b.SemExtendBatch(ctx, exts)
	}
	out := make([]SemExtended, len(exts))
	SemExtendEach(ctx, s, exts, out, nil)
	return out
}

// semExtendEach runs s.SemExtend for exts[i], for every i in which (all
// when which is nil), at once.
func SemExtendEach(ctx context.Context, s Semaphores, exts []Extension, out []SemExtended, which []int) {
	atOnce(len(exts), which, func(i int) {
		out[i].Permit, out[i].Err = s.SemExtend(ctx, exts[i].Key, exts[i].Token, exts[i].TTL)
	})
}
