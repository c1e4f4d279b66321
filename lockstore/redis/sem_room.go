package redis

import (
	"context"
	_ "embed"
	"strings"

	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

// A semaphore's waiters wait in rooms as a lock's do (wait_room.go): one
// heartbeat script per gateway per semaphore, about once a second, for all
// its local waiters. A lock's heartbeat says who is first; a semaphore's
// says which of this gateway's tickets stand among the first live ones
// that may take a free permit (with k free, the first k), and the gateway
// wakes exactly those. Otherwise a waiter sleeps until a release, grant or
// leave names its ticket, or, when first, until the first permit expires.

// semBeat is one heartbeat of a semaphore's room r.
func (s *Store) semBeat(r *room) {
	oldest, tries, settled := r.oldest()
	if oldest == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitRefresh)
	defer cancel()
	reply, err := script.SemHeartbeat(ctx, s.client, r.key, s.rooms.gateway, waitHeartbeat, oldest.ticket)
	if err != nil || len(reply) == 0 {
		return // the waiters' own deadlines bound them; try again next time
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if reply[0] != int64(1) {
		r.lost(oldest, tries, settled)
		return
	}
	for _, t := range reply[1:] {
		ticket, _ := t.(string)
		if e := r.byID[ticket]; e != nil {
			poke(e.Value.(*roomWaiter).wake) // a permit is free, and ours to take
		} else if strings.HasPrefix(ticket, s.rooms.gateway+".") {
			// Our ticket, of a waiter that has gone without leaving (its
			// leave failed): take it out of the line.
			go s.semLeave(context.Background(), r.key, ticket)
		}
	}
}
