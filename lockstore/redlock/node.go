package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/lockgateway/lockgateway/internal/sleep"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/redis/go-redis/v9"
)

// redlockNode is one Redis master of a Redlock.
type redlockNode struct {
	addr   string
	client *redis.Client
	batch  *script.Batch // client, for the scripts of requests (script/batch.go)
	// functions sends client's scripts that carry rule D's deadline as the
	// library's functions (script/functions.go).
	functions *script.Functions
	notifier  *script.Notifier // releases on this node, for waiters
	// probe is a client of its own for the prober (see observe), so that
	// its dials neither wait for client's pool nor count towards the
	// failed dials after which go-redis stops dialing client for a second.
	probe *redis.Client
	// renewals is a client of its own for batches of renewals, whose
	// calls may wait past NodeTimeout (renewalTimeout).
	renewals *redis.Client

	// writes and semWrites are batch and client for the scripts that
	// write: with the node list check in front of those that grant or
	// lengthen (nodeset.go), and rule D's deadline on those that grant or
	// delete (script/clock.go).
	writes, semWrites script.Clocked

	warmMu sync.Mutex // one warm-up at a time: two would share the pool

	mu               sync.Mutex
	up               bool
	lastOK           time.Time // the last answer (monotonic)
	down             bool      // calls are skipped until the prober hears it
	warm             bool      // connections opened and scripts loaded once
	runID            string
	restartSeen      time.Time // when the last restart was seen
	quarantinedUntil time.Time // restartSeen + r.quarantine
}

// errNodeDown is the answer of a node that is down: it was not asked.
var errNodeDown = fmt.Errorf("%w: node down (it did not answer its last calls; probing it)", lockstore.ErrUnavailable)

// Nodes reports each node's state, in the order the nodes were given.
func (r *Store) Nodes() []lockstore.NodeStatus {
	now := time.Now()
	out := make([]lockstore.NodeStatus, len(r.nodes))
	for i, n := range r.nodes {
		n.mu.Lock()
		out[i] = lockstore.NodeStatus{Addr: n.addr, Up: n.up && !n.down}
		if now.Before(n.quarantinedUntil) {
			out[i].QuarantinedUntil = n.quarantinedUntil.Round(0)
			out[i].Quarantine = r.quarantineReason(n.restartSeen, n.quarantinedUntil)
		}
		n.mu.Unlock()
		if held := r.set.heldUntil(i); held.After(out[i].QuarantinedUntil) {
			out[i].QuarantinedUntil = held.Round(0)
			out[i].Quarantine = fmt.Sprintf("found without the node list marker, so it lost its data (or is new): quarantined on the node itself until %s, "+
				"LOCKGW_MAX_TTL (%s) plus 1%% after it was found; every gateway sees it. To avoid this: run Redis with appendonly yes and appendfsync always, "+
				"or lower LOCKGW_MAX_TTL to the longest lease clients need; a node that was down for LOCKGW_MAX_TTL before it came back may be let in at once: "+
				"DEL lockgw:redlock:quarantine on it (docs/backends.md, Restarted nodes)", held.UTC().Format(time.RFC3339), r.maxTTL)
		}
	}
	return out
}

// quarantineReason says why a node seen to restart at seen does not count
// until until, and what an operator can do: for /readyz and the log.
// docs/safety.md, "Restarted nodes", argues the rule.
func (r *Store) quarantineReason(seen, until time.Time) string {
	return fmt.Sprintf("restarted (a new run_id, seen at %s), so it may have lost leases it granted: its votes count again at %s, "+
		"LOCKGW_MAX_TTL (%s) plus 1%% after the restart was seen; until then a grant needs a majority of all the nodes among the others. "+
		"To avoid this: lower LOCKGW_MAX_TTL to the longest lease clients need; run Redis with appendonly yes and appendfsync always "+
		"(then restarting the gateway ends the quarantine safely); or keep a crashed node down for LOCKGW_MAX_TTL before starting it, "+
		"and then DEL lockgw:redlock:quarantine on it and restart the gateways (docs/backends.md, Restarted nodes)",
		seen.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339), r.maxTTL)
}

// observe records whether the node answered, unless the caller's own
// context ended the call.
//
// A node that has not answered for a whole NodeTimeout is marked down: the
// calls of every operation skip it (it counts as not answering, which is
// never unsafe), and one prober PINGs it, over a client of its own, every
// half NodeTimeout until it answers; then it counts again. Without this,
// every request would open a connection to a paused node, each left in its
// accept queue when the call times out, until the queue is full and dials
// fail; go-redis then stops dialing for a second at a time, and the node,
// resumed, would not count for that second.
//
// Every call that times out also closes its connection (go-redis cannot
// tell a late reply from the next one's), so a node that missed its
// timeout for a while may have none left in client's pool. A request then
// opens one inside its NodeTimeout: HELLO and the restart guard's INFO
// before its own command, three round trips where the command alone is
// one. Where a round trip takes more than a third of NodeTimeout (a loaded
// machine, a distant node), that never fits though the command would, each
// attempt closes the connection it half opened, and the node never counted
// again. So the prober lets a node count again only once client's pool has
// connections, opened outside any request's NodeTimeout (fill).
func (r *Store) observe(ctx context.Context, n *redlockNode, err error) {
	if ctx.Err() != nil {
		return
	}
	now := time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	// A node that refuses writes answered: it is up, and no prober helps.
	if err == nil || !errors.Is(err, lockstore.ErrUnavailable) || errors.Is(err, lockstore.ErrRefused) {
		n.up, n.lastOK = true, now
		return
	}
	n.up = false
	if !n.down && now.Sub(n.lastOK) >= r.nodeTimeout {
		n.down = true
		r.background(func() { r.probeUntilUp(n) })
	}
}

func (n *redlockNode) isDown() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.down
}

// probeUntilUp PINGs a down node until it answers and refills its pool
// (see observe), then lets it count again, or until the store closes.
func (r *Store) probeUntilUp(n *redlockNode) {
	stopped := r.stopped
	every := max(r.nodeTimeout/2, 5*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(stopped, r.nodeTimeout)
		err := n.probe.Ping(ctx).Err()
		cancel()
		if err == nil {
			err = r.refill(stopped, n)
		}
		if err == nil {
			n.mu.Lock()
			n.down, n.up, n.lastOK = false, true, time.Now()
			n.mu.Unlock()
			return
		}
		select {
		case <-stopped.Done():
			return
		case <-t.C:
		}
	}
}

// refill opens refillConns connections in a node the prober heard. It
// does not take warmMu: a warm-up may be opening connections beside it,
// which only opens a few more, while waiting for it would keep a node that
// answers out of every request until the warm-up's deadline (and, in the
// simulator, a goroutine blocked on a mutex keeps a testing/synctest
// bubble's clock from moving while the warm-up waits on it: TestSimRedlock
// hung). fill fails at once while go-redis's dial breaker is open
// (client's failed dials): the node could serve no request yet either.
func (r *Store) refill(stopped context.Context, n *redlockNode) error {
	ctx, cancel := context.WithTimeout(stopped, r.warmTimeout())
	defer cancel()
	if err := fill(ctx, n.client, refillConns); err != nil {
		return err
	}
	_ = fill(ctx, n.renewals, refillConns) // best effort: renewals dial what they lack
	return nil
}

func (n *redlockNode) quarantined(now time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return now.Before(n.quarantinedUntil)
}

func (n *redlockNode) isWarm() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.warm
}

// The scripts a Redlock runs, loaded on each node by the warm-up (with the
// functions library) so that the first requests do not pay for EVALSHA's
// NOSCRIPT and the EVAL after it.
var redlockScripts = []*redis.Script{script.AcquireScript, script.ExtendScript, script.ReleaseScript, script.InspectScript, script.ConfirmScript, script.DiscardScript,
	script.SemAcquireScript, script.SemExtendScript, script.SemReleaseScript, script.SemReadScript, script.SemInspectScript, script.SemConfirmScript, script.SemDiscardScript, script.ClockScript}

// warmUp warms n, retrying with a backoff while n does not answer, until it
// succeeds or the store closes. Its deadlines are generous: warming up is
// not a request.
func (r *Store) warmUp(n *redlockNode) {
	ctx := r.stopped
	backoff := 50 * time.Millisecond
	for !n.isWarm() {
		wctx, wcancel := context.WithTimeout(ctx, r.warmTimeout())
		err := r.warm(wctx, n)
		wcancel()
		if err == nil {
			return
		}
		if !sleep.For(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// refillConns is how many connections the prober opens in a down node's
// pool before the node counts again: the batch's senders and a few calls
// beside them (script.Batch sends a node's calls on at most BatchSenders
// connections at a time, and queues the rest into their pipelines);
// requests open more as they need them. The warm-up's most of a pool, one
// connection after another, kept a node out of every request until the
// refill's deadline where round trips are slow: at an 80 ms one
// (TestRedlockNodesWithoutConnectionsCountAgain) it counted again 4.6 to
// 4.9 s after its connections were closed, with refillConns 0.83 s.
const refillConns = script.BatchSenders + 2

// warmTimeout bounds one warm-up of a node, or one refill of its pool:
// generous, as neither is a request.
func (r *Store) warmTimeout() time.Duration { return max(2*time.Second, 20*r.nodeTimeout) }

// warm opens most of n's connection pool (fill) and loads the scripts, then
// marks n warm. n is warm once the scripts are loaded and one connection
// answered.
func (r *Store) warm(ctx context.Context, n *redlockNode) error {
	n.warmMu.Lock()
	defer n.warmMu.Unlock()
	if n.isWarm() {
		return nil
	}
	for _, s := range redlockScripts {
		if err := s.Load(ctx, n.client).Err(); err != nil {
			return script.RedisErr(err)
		}
	}
	n.functions.LoadAside() // the warm-up does not wait: calls go as scripts meanwhile
	if err := fill(ctx, n.client, n.client.Options().PoolSize-16); err != nil {
		return err
	}
	// The renewals' own pool too, a few connections: a cold one made the
	// first renewals of holds dial and check the node inside their wait,
	// which a loaded machine missed (TestHold lost its hold).
	_ = fill(ctx, n.renewals, refillConns)
	n.mu.Lock()
	n.warm, n.up, n.lastOK = true, true, time.Now()
	n.mu.Unlock()
	return nil
}

// fill opens connections in client's pool until it holds want (the
// warm-up: most of a full pool, so that a burst of requests waits for no
// dial and no handshake inside its NodeTimeout; each connection goes
// through OnConnect, so the restart guard knows the node's run_id before
// the first request). It dials one connection at a time, holding each
// until the pool is full: dials made all at once queue behind one another
// inside their DialTimeout (NodeTimeout), time out, and count towards
// go-redis's dial breaker. Idle connections are taken (and PINGed) first,
// so a pool that holds want already costs one round trip, and dead ones,
// which go-redis drops when it takes them, are replaced. Opening
// connections is best effort: fill fails only when no connection
// answered.
func fill(ctx context.Context, client *redis.Client, want int) error {
	want = max(want, 1)
	conns := make([]*redis.Conn, 0, want)
	defer func() {
		for _, c := range conns {
			_ = c.Close() // back to the pool
		}
	}()
	var errs []error
	for len(conns) == 0 || len(conns)+int(client.PoolStats().IdleConns) < want {
		c := client.Conn()
		if err := c.Ping(ctx).Err(); err != nil {
			_ = c.Close()
			errs = append(errs, err)
			if ctx.Err() != nil || len(errs) > 3 {
				break
			}
			continue
		}
		conns = append(conns, c)
	}
	if len(conns) == 0 {
		return script.RedisErr(errors.Join(errs...))
	}
	return nil
}

// onConnect returns the OnConnect hook that detects restarts: it runs on
// every new connection before the connection carries any command.
func (r *Store) onConnect(n *redlockNode, next func(context.Context, *redis.Conn) error) func(context.Context, *redis.Conn) error {
	return func(ctx context.Context, cn *redis.Conn) error {
		if next != nil {
			if err := next(ctx, cn); err != nil {
				return err
			}
		}
		info, err := cn.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		runID := infoField(info, "run_id")
		if runID == "" {
			return errors.New("lockstore: INFO server reported no run_id")
		}
		if other := r.sameRedis(n, runID); other != nil {
			// One server listed twice would vote twice: a quorum that counts
			// it twice is no quorum. Whichever connected first keeps it.
			r.log.Error().Str("node", n.addr).Str("same_as", other.addr).
				Msg("redlock: two nodes are the same Redis; the second never counts (list each master once)")
			return fmt.Errorf("lockstore: redlock node %s is the same Redis as %s", n.addr, other.addr)
		}
		n.mu.Lock()
		prev := n.runID
		n.runID = runID
		restarted := prev != "" && prev != runID
		var seen, until time.Time
		if restarted {
			seen = time.Now()
			until = seen.Add(r.quarantine)
			n.restartSeen, n.quarantinedUntil = seen, until
		}
		n.mu.Unlock()
		if restarted {
			r.log.Warn().Str("node", n.addr).Time("until", until).
				Msg("redlock: node quarantined: " + r.quarantineReason(seen, until))
		}
		return nil
	}
}

// sameRedis returns another node whose server has runID, or nil; it then
// records runID as n's, so that of two nodes naming one server, the first
// to connect keeps it.
func (r *Store) sameRedis(n *redlockNode, runID string) *redlockNode {
	r.idMu.Lock()
	defer r.idMu.Unlock()
	for _, o := range r.nodes {
		if o == n {
			continue
		}
		o.mu.Lock()
		same := o.runID == runID
		o.mu.Unlock()
		if same {
			return o
		}
	}
	n.mu.Lock()
	if n.runID == "" {
		n.runID = runID // the restart check below then sees no change
	}
	n.mu.Unlock()
	return nil
}

// CheckDistinct asks every node for its server's run_id and fails when two
// nodes are one Redis (one host under two names, say 127.0.0.1:6379 and
// localhost:6379). Nodes that do not answer are left out; a duplicate among
// them is refused when it connects.
func (r *Store) CheckDistinct(ctx context.Context) error {
	ids := make([]string, len(r.nodes))
	var wg sync.WaitGroup
	for i, n := range r.nodes {
		wg.Go(func() {
			info, err := n.probe.Info(ctx, "server").Result()
			if err == nil {
				ids[i] = infoField(info, "run_id")
			}
		})
	}
	wg.Wait()
	seen := make(map[string]int)
	for i, id := range ids {
		if id == "" {
			continue
		}
		if j, dup := seen[id]; dup {
			return fmt.Errorf("lockstore: redlock nodes %d (%s) and %d (%s) are the same Redis server (one run_id): a quorum would count it twice; list each independent master once",
				j+1, r.nodes[j].addr, i+1, r.nodes[i].addr)
		}
		seen[id] = i
	}
	return nil
}

// infoField returns a field of an INFO reply ("name:value" lines).
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
