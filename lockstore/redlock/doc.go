// Package redlock is the Redlock backend: a lockstore.Store and
// lockstore.Semaphores over N independent Redis masters, a lease held
// where a majority of them holds it. Open builds one from redis:// URLs
// (LOCKGW_REDLOCK_URLS); docs/safety.md argues, rule by rule, why no
// interleaving of its operations grants one key to two holders.
//
// Its files:
//
//	redlock.go  the type, its options (Options) and Open/New
//	lock.go     Acquire, Extend, Release, Inspect, Ping of locks: rounds
//	            of provisional values, confirmed by a quorum (rule A)
//	sem.go      the same for permits
//	round.go    a round's fence and its confirmation (rule G1)
//	quorum.go   fan-out to the nodes and counting their answers, over one
//	            node list or two during a transition (rule T)
//	node.go     one node: health, warm-up, the restart guard
//	nodeset.go  the node list the nodes serve, restarts (rule Q) and
//	            transitions (rule T)
//	list.go     GET /locks and /semaphores over a majority
//	signal.go   what the watch hubs listen to
//
// Every script it runs on a node is called through
// lockstore/internal/script, which it shares with lockstore/redis; waiting
// is lockstore/internal/wait's loop (wait.Raced: there is no queue).
package redlock
