// Package sim is the deterministic protocol simulator of the Redis and
// Redlock backends (issue 26; docs/safety.md): one goroutine at a time, a
// seeded PRNG, virtual time in µs, and every fault (delay, loss,
// duplication, reordering, a paused node, a node's clock offset and rate;
// on Redlock also crashes that lose a node's data, gateway restarts) drawn from the
// seed, so that a failing seed replays exactly. Gateways run the backends'
// real Go code and nodes the real Lua scripts, in internal/luaredis (the
// differential test TestLuaredisMatchesRedis in lockstore/internal/script
// holds it to redis-server).
//
// What it checks is what clients were told, never the nodes' state: a
// History records every request as it is sent and answered, and its
// checkers (check.go) report a Violation when two tokens hold one lock at
// once, more than Limit tokens hold permits, permits held at once share a
// fence, a new grant's fence is not above the fences answered before, a
// retry or an extend of a held lease changes its fence, a grant runs after
// its gateway gave up on it (rule D), or a request is answered 500. The
// rules the backends rely on have controls, a script or an option that
// undoes one, which the models' …Controls tests require the simulator to
// catch: a check that cannot fail proves nothing.
//
// Two models plug into it:
//
//   - The `redis` model (lockstore/redis/sim_test.go): World is its world.
//     NewWorld's newStore builds each gateway's store, the real Redis Store,
//     over a go-redis client of the world's (whose EvalSha and Eval park
//     the calling goroutine and become messages the world delivers,
//     delays, loses, duplicates or reorders) and rule D's clocks on the
//     world's time.
//   - The Redlock model (lockstore/redlock/sim_world_test.go) has a world
//     of its own: it runs the whole real Redlock store, with its go-redis
//     clients and fan-out goroutines, in a testing/synctest bubble, and
//     simulates only the connections to the nodes. It takes from this
//     package the network model (Net), the event queue (Queue), the
//     scripts as nodes run them (Script), the workload's store calls
//     (CallFor, AnswerOf), the History and its checks, and the run's
//     budget, flags and report (Budget, RedlockBudget, Run).
//
// Both models' tests are built with `//go:build !race`: only one goroutine
// runs at a time, handing control over channels, so the race detector
// finds nothing there and only slows the Lua interpreter several times
// over. make test runs them without -race, last and on their own
// (.ci/gotest). The flags -sim.seed, -sim.first, -sim.ops, -sim.duration
// and -sim.control (Seed, First, Ops, Duration, Control) pick the seeds and
// the control:
//
//	go test -short ./lockstore/redis -run TestSimRedis             the short budget
//	go test ./lockstore/redis -run TestSimRedis -sim.seed 7 -v     one seed, its numbers
//	go test ./lockstore/redis -run TestSimRedis -sim.control old-release
//	go test ./lockstore/redlock -run 'TestSimRedlock$' -sim.duration 10m   (make sim)
package sim
