// Package script is the Go side of the Lua scripts (lua/) that both Redis
// backends, lockstore/redis and lockstore/redlock, run on a Redis node: one
// function per script call, which builds its KEYS and ARGV (named in the
// script's header) and reads its reply in the domain's terms; the key
// layout and the stored values' formats; and what every call on a node
// goes through:
//
//	lock.go      locks: acquire, extend, release, inspect; keys and values
//	sem.go       semaphores: the same for permits
//	confirm.go   Redlock's confirmation of a round's value (rule A)
//	nodeset.go   Redlock's node list, restart and transition markers
//	queue.go     the wait queue: heartbeats, leaving the line
//	unwait.go    taking back a grant the replicas did not acknowledge
//	quota.go     per-user quotas on a Cluster
//	window.go    rate-limit windows
//	list.go      listing keys by SCAN
//	clock.go     rule D: a grant's deadline by the node's clock
//	batch.go     one node's concurrent scripts sent as one pipeline
//	notifier.go  pub/sub: waiters and watchers told of releases
//	trace.go     spans of the scripts' calls
//	slot.go      a key's Redis Cluster slot
package script
