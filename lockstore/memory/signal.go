package memory

import (
	"context"
	"sync"
)

// Signal implements lockstore.Signaler: in process, for every grant, renewal,
// extend and release of key.
func (m *Store) Signal(_ context.Context, key string, wake chan struct{}) (func(), error) {
	return m.signals.add(&m.mu, key, wake), nil
}

// signals is a Store's watchers' wake-ups, by key; the mutex of what
// it signals guards it.
type signals map[string]map[chan struct{}]struct{}

// add registers wake for key under mu and returns what removes it.
func (s *signals) add(mu *sync.Mutex, key string, wake chan struct{}) func() {
	mu.Lock()
	defer mu.Unlock()
	if *s == nil {
		*s = make(signals)
	}
	ws := (*s)[key]
	if ws == nil {
		ws = make(map[chan struct{}]struct{})
		(*s)[key] = ws
	}
	ws[wake] = struct{}{}
	return func() {
		mu.Lock()
		defer mu.Unlock()
		delete(ws, wake)
		if len(ws) == 0 {
			delete(*s, key)
		}
	}
}

// notify wakes key's watchers; the mutex given to add must be held.
func (s signals) notify(key string) {
	for wake := range s[key] {
		select {
		case wake <- struct{}{}:
		default: // already woken
		}
	}
}

// changed signals key's watchers. m.mu must be held.
func (m *Store) changed(key string) { m.signals.notify(key) }

// SemSignal implements lockstore.SemSignaler: in process, for every grant,
// renewal, extend and release of a permit on key.
func (m *Store) SemSignal(_ context.Context, key string, wake chan struct{}) (func(), error) {
	return m.sems.signals.add(&m.sems.mu, key, wake), nil
}
