package lockstore

import (
	"context"
	"fmt"
	"sync"
)

// twinGate runs a gateway's acquires of one token on one semaphore one at
// a time. Two at once (a client's retry while its first request is still
// in flight: twins) would each reach every node, and a node grants the
// slot to whichever comes first and re-grants it to the other; each round
// then sees a different mix of new and re-granted votes, and picks its
// fence by a different rule (semConfirm): one token, two fences answered,
// each written back over the other (TestRedlockSemTwinsShareOnePermit).
// One after the other, the second round finds the first's permit on every
// node it granted and keeps its fence. Twins sent through two gateways
// are not serialized: docs/safety.md, "Semaphores", says what remains.
// The zero value is ready to use.
type twinGate struct {
	mu    sync.Mutex
	gates map[string]*twinTurn
}

type twinTurn struct {
	turn    chan struct{} // holds one value while a twin runs
	waiting int           // twins running or waiting; the entry goes with the last
}

// enter waits for the turn of (key, digest), or for ctx to end; leave
// gives it back.
func (g *twinGate) enter(ctx context.Context, key, digest string) (leave func(), err error) {
	id := key + "\x00" + digest
	g.mu.Lock()
	if g.gates == nil {
		g.gates = make(map[string]*twinTurn)
	}
	t := g.gates[id]
	if t == nil {
		t = &twinTurn{turn: make(chan struct{}, 1)}
		g.gates[id] = t
	}
	t.waiting++
	g.mu.Unlock()
	done := func() {
		g.mu.Lock()
		if t.waiting--; t.waiting == 0 {
			delete(g.gates, id)
		}
		g.mu.Unlock()
	}
	select {
	case t.turn <- struct{}{}:
		return func() { <-t.turn; done() }, nil
	case <-ctx.Done():
		done()
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
}
