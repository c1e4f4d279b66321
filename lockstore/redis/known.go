package redis

import (
	"sync"

	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

// knownPairs are the lease pairs (value, expiry) this gateway was answered
// by the scripts that wrote them: a grant, a renewal, an extend. A release
// of the same lease through this gateway sends release.lua the remembered
// pair at once, one round trip, instead of reading the lease first
// (docs/safety.md, rule V3).
//
// A pair is only ever a shortcut to the release's first try: release.lua
// deletes nothing unless the lease is exactly that pair when it runs, and,
// as every delete, only before the release is answered, on the server
// whose clock was sampled (rule D). A stale pair (another gateway extended
// the lease, a renewal's answer was lost, an older reply stored after a
// newer one, a pair from the server before a failover or a slot move) is
// answered "changed", after which the release reads the lease as rule V2
// says; one that matches there names the token's lease as written before
// the release was answered, which the release may delete. So nothing here
// needs to be exact, complete or in order: a pair is taken (and forgotten)
// by the release that uses it, and when the map is full an arbitrary one
// makes room.
type knownPairs struct {
	mu    sync.Mutex
	pairs map[string]script.LockValue // by key
}

// knownMax bounds the gateway's memory for pairs (a few hundred bytes
// each, a few MiB at most): a lease whose release never comes through
// this gateway (it expired, another gateway released it) leaves its pair
// until a release of the key or a full map takes it.
const knownMax = 16384

// remember keeps v, a lease of key as a script reply left it, unless the
// reply carried no expiry (a provisional Redlock value, an older script).
func (k *knownPairs) remember(key string, v script.LockValue) {
	if v.Expiry == 0 || v.Raw == "" {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.pairs == nil {
		k.pairs = make(map[string]script.LockValue)
	}
	if _, ok := k.pairs[key]; !ok && len(k.pairs) >= knownMax {
		for other := range k.pairs { // any one: iteration starts at random
			delete(k.pairs, other)
			break
		}
	}
	k.pairs[key] = v
}

// take forgets key's pair and answers it when it is digest's lease.
func (k *knownPairs) take(key, digest string) (script.LockValue, bool) {
	k.mu.Lock()
	v, ok := k.pairs[key]
	delete(k.pairs, key)
	k.mu.Unlock()
	return v, ok && digest != "" && v.Digest == digest
}
