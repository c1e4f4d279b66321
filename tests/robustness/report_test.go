//go:build chaos

package chaos_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lockgateway/lockgateway/tools/chaos"
)

// writeDoc writes docs/chaos-report.md (path is relative to the module root)
// from this run's table.
func writeDoc(path string, took time.Duration) error {
	if !filepath.IsAbs(path) {
		root, err := chaos.ModuleRoot()
		if err != nil {
			return err
		}
		path = filepath.Join(root, path)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `# Safety under faults

What lockgateway survives, from its own fault-injection suite (`+"`make chaos`"+`, in
[`+"`tests/robustness/`"+`](../tests/robustness) with the harness and checkers in
[`+"`tools/chaos/`"+`](../tools/chaos)). This file is written by that run; the
numbers below are real.

- **Date:** %s
- **Machine:** %s
- **Commit:** %s
- **Command:** `+"`make chaos`"+`, that is `+"`CHAOS_REPORT=docs/chaos-report.md go test -tags chaos -p 1 -count=1 -timeout 30m -v ./tests/robustness/`"+` (%d runs of each scenario; `+"`CHAOS_RUNS`"+` changes it)
- **Took:** %v

## Results

Each run starts from nothing: five `+"`redis-server`"+` processes (Redlock) or one
(Redis), without persistence; two gateway processes built from the tree, each
reaching each node through a toxiproxy link of its own; 8 clients (16 on 8 keys for
many-keys) contending through both gateways over HTTP, with leases of 400 ms,
`+"`LOCKGW_MAX_TTL=1.5s`"+`, `+"`LOCKGW_REDLOCK_NODE_TIMEOUT=100ms`"+`. Every holder reads and
increments a counter that checks fences. The columns after "operations" count what
each checker found: pairs of tokens that held a key at once (overlap), keys whose
history is not linearizable, grants whose fence was out of order, counters that lost
updates, and Redis keys in a wrong state. What a row's own checkers found beyond these
columns follows its verdict (holds: lost-late).

%s
A **safe** row passes with zero violations in every column. A **control** is a
known-unsafe case, staged so the unsafe outcome is certain: it passes only if the
checkers it names catch it (and the others stay at zero, unless it says otherwise).
Controls are how we know a zero means something.

## Scenarios

`, chaos.Today(), chaos.Machine(), chaos.Commit(), runsOf(), took.Round(time.Second), report.Table())
	for _, sc := range scenarios {
		fmt.Fprintf(&b, "- **%s** (%s): %s.\n", sc.name, strings.Join(sc.backends, ", "), sc.desc)
	}
	b.WriteString(docTail)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

const docTail = `
Operations are the HTTP requests the clients made (acquires, extends, releases,
including the ones answered 409 or 503 and the ones they abandoned).

## Checkers

- **overlap**: no two tokens believe they hold a key at once. A client holds a
  lease from the moment the 201 (or an extend's 200) reached it until the earlier of
  the answer's ` + "`expires_at`" + ` and the moment it sent its release. All
  timestamps are the host's wall clock, which the gateways, the clients and Redis
  share (one host), so a receive time and an ` + "`expires_at`" + ` compare directly;
  ` + "`expires_at`" + ` is conservative by construction, so a slow machine cannot make
  a correct run fail.
- **linearizability**: each key's history of grants, extends and releases is
  linearizable (porcupine) against a lease model: a grant needs the previous holder's
  lease to be possibly over (past its ` + "`expires_at`" + `) and a higher fence; an
  extend or release that succeeds needs the caller to possibly still hold the lease
  (before its answer's arrival plus the TTL); a 404 or 412 needs the caller not to
  surely hold it. Abandoned requests may take effect at any later time. 409s and
  acquires with unknown outcome say nothing certain and are left out.
- **fences**: a grant asked for after another grant was answered carries a higher
  fence, and no fence is granted twice (the guarantee docs/backends.md documents).
- **counter**: the fenced counter (it refuses reads and writes below the highest
  fence it has seen) ends equal to the increments it acknowledged: no update lost,
  even from holders paused past their lease.
- **state**: sampled every 200 ms on every node: every ` + "`lockgw:*`" + ` key has a TTL,
  no lock key has more than the maximum TTL left; and 1.5 s after the last request no
  lock key is left anywhere.
- **holds** (the rows holds and holds-slow-stream, CheckHolds): a holder on a stream
  holds from its ` + "`acquired`" + ` event's arrival until the first of a final event's arrival,
  its stream breaking, its letting go, and the last ` + "`expires_at`" + ` it had been told by
  then (a renewal that arrives after that does not start the hold again). A hold and
  another hold or a plain lease believed held at once count as **overlap**; every
  ` + "`lost`" + ` that arrived at or after the last ` + "`expires_at`" + ` its holder had been told
  counts as **lost-late**.

## Bugs this suite found

- **Fixed:** a gateway released a grant whose client had gone away (it "will never
  learn the token") even when the client had chosen the token itself, so a client
  that retried with its token and was told "200, you hold it" could lose that lease
  to the first request's clean-up, and another client was granted the key (abandon,
  Redis). The gateway now releases only grants to tokens it made
  (` + "`handlers.TestGrantToAbandonedRequestWithClientTokenIsKept`" + `).
- **Fixed:** on Redlock, the clean-up of one request could delete the lease of
  another request with the same client-chosen token: a failed acquire round released
  its token on every node (in the background for the nodes that had not answered), a
  release was answered 204 while its part to a slow node was still on the wire, and
  an extend that found the lease gone released its token everywhere. A retry, a twin
  sent at once or a re-acquire with that token, granted in the meantime, lost its
  lease to those releases, and another client was granted the key while it held it
  (retry-after-503, same-token-twins, release-reacquire-slow-node,
  extend-vs-reacquire: each found overlaps in every run before the fix).
- **Fixed:** a gateway stopped (SIGSTOP) past the end of its holds said ` + "`lost`" + ` when
  it resumed, up to 1.6 s after the ` + "`expires_at`" + ` it had told, and could tell a
  renewal it had before it stopped after that end (holds, both backends: 4 and 5 late
  ` + "`lost`" + ` events in one run each before the fix). A hold now says nothing past the
  last ` + "`expires_at`" + ` it told: the stream closes without a final event
  (` + "`handlers.TestHoldSaysNothingAfterTheEnd`" + `).

## Faults and how they are made

- ` + "`kill -9`" + ` (SIGKILL) of redis-server processes; a restart is a new empty process
  on the same port (no persistence).
- SIGSTOP/SIGCONT of a Redis node or of a gateway process. The gateway is stopped at
  a chosen point by a toxiproxy tap: the moment it sends the operation's script to
  node 0.
- Latency, blackholes, dropped replies and connection resets between one gateway and
  one node: toxiproxy, embedded in the test process.
- Clock steps on a Redis node: an ` + "`LD_PRELOAD`" + ` shim (compiled by the suite)
  shifts the node's ` + "`CLOCK_REALTIME`" + `, ` + "`gettimeofday`" + ` and ` + "`time`" + `,
  so Redis expires keys and answers ` + "`TIME`" + ` by the stepped clock, as after an NTP
  step. (libfaketime hangs Redis's jemalloc at start-up, hence the shim.)
- Clients that give up: per-request timeouts down to 10 ms.
- A slow path from the gateways to their holders (holds-slow-stream): a toxiproxy
  between them that holds what the gateways send.

## What this shows, and what it does not

The safe rows show that, under these faults, no two clients ever held a lease at
once, the lock history was linearizable, fences increased, and a fenced resource lost
no update. The controls show the limits docs/safety.md lists, each caught by the
checkers:

- a **clock step** on a Redis host ends leases early there: a second holder while the
  first is valid (both backends);
- a Redlock node **restarted empty before a gateway first reached it** counts at once
  for that gateway: a second holder (gateways that were running quarantine it:
  restart-guarded);
- the single **Redis restarted without persistence** forgets its leases: a second
  holder;
- the single **Redis restarted empty with its clock behind** hands out lower fences;
- a **resource without fences** loses updates when a holder is paused past its lease,
  even with a correct lock service.
- a **slow path between a gateway and its holders** delivers ` + "`lost`" + ` after the lease's
  end (holds-slow-stream); a holder that also stops at the last ` + "`expires_at`" + ` it was
  told, as every holder in the suite does, is still never a second holder.

In every safe row, on both backends, clients retry half of the acquires whose answer
they lost with the same token, as docs/api.md says they may; four rows race requests
with the same token against each other's clean-up on purpose.

In every control but no-fencing, the fenced counter lost nothing: fences are what
keeps data safe when the lock is not. A finite run shows the absence of the violations it could
find, not of all of them; the faults are the ones listed, on one host.
`
