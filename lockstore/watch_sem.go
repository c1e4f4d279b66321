package lockstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// Watching semaphores (watch.go): the state is the set of permits.

// SemState is a semaphore as a watcher sees it.
type SemState struct {
	Sem SemaphoreState // no Holders: free
	// Slack is how far past its ExpiresAt a permit may still end, as far
	// as this read can tell (LockState.Slack; on Redlock the largest over
	// the permits).
	Slack time.Duration
}

// Held reports whether any permit is held.
func (s SemState) Held() bool { return len(s.Sem.Holders) > 0 }

// Tag names the set of permits for an HTTP entity tag: "free", or
// "permits-" and a digest of their fences (each names one grant; a
// semaphore may have 10 000). Extends do not change it.
func (s SemState) Tag() string {
	if !s.Held() {
		return "free"
	}
	h := sha256.New()
	var b [8]byte
	for _, p := range s.Sem.Holders {
		binary.BigEndian.PutUint64(b[:], uint64(p.Fence))
		h.Write(b[:])
	}
	return "permits-" + hex.EncodeToString(h.Sum(nil)[:12])
}

// SameSem: the same permits (fences), each with the same expiry within
// what the two reads could not tell apart (SameLock says why a permit
// nobody extended always passes). Holders are ordered by fence.
func SameSem(a, b SemState) bool {
	if len(a.Sem.Holders) != len(b.Sem.Holders) || a.Sem.Limit != b.Sem.Limit {
		return false
	}
	for i, p := range a.Sem.Holders {
		q := b.Sem.Holders[i]
		if p.Fence != q.Fence {
			return false
		}
		d := q.ExpiresAt.Sub(p.ExpiresAt)
		if d > a.Slack+2*time.Millisecond || -d > b.Slack+2*time.Millisecond {
			return false
		}
	}
	return true
}

// SemSignaler is a Semaphores store that can tell when a semaphore may
// have changed (as Signaler for locks).
type SemSignaler interface {
	SemSignal(ctx context.Context, key string, wake chan struct{}) (stop func(), err error)
}

// NewSemHub returns a Hub watching the semaphores of store.
func NewSemHub(store Semaphores, timeout time.Duration) *Hub[SemState] {
	spread, _ := store.(Spreader)
	k := Source[SemState]{
		Inspect: func(ctx context.Context, key string) (SemState, error) {
			st, held, slack, err := watchRead(ctx, key, spread, store.SemInspect, Spreader.SemInspectSpread)
			if err != nil {
				return SemState{}, err
			}
			if !held {
				return SemState{Sem: SemaphoreState{Key: key}}, nil
			}
			return SemState{Sem: st, Slack: slack}, nil
		},
		Same: SameSem,
		Ends: func(s SemState) time.Time {
			var first time.Time
			for _, p := range s.Sem.Holders {
				end := watchEnd(spread, p.ExpiresAt, p.Granted)
				if first.IsZero() || end.Before(first) {
					first = end
				}
			}
			return first
		},
		Timeout: timeout,
	}
	if s, ok := store.(SemSignaler); ok {
		k.Signal = s.SemSignal
	}
	return newWatchHub(k, spread)
}
