package lockstore

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The node list a Redlock's nodes serve. Two gateways with different lists
// could grant one key on two majorities that share no node, so each node
// keeps a marker, setKey, naming the list it serves, and the scripts that
// grant or lengthen refuse (changing nothing) on a node whose marker is not
// the caller's list. docs/safety.md, "Changing the node list", has the
// rules and the argument; this file is all of it on the gateway's side.

var (
	//go:embed lua/nodeset.lua
	nodesetLua string

	//go:embed lua/nodeset_mark.lua
	nodesetMarkLua    string
	nodesetMarkScript = redis.NewScript(nodesetMarkLua)

	// guardedScripts are the scripts that grant or lengthen, by the hash
	// of their plain form, each with nodeset.lua in front.
	guardedScripts = guard(deadlineLua+acquireLua, extendLua, deadlineLua+confirmLua,
		deadlineLua+semCommonLua+semAcquireLua, semCommonLua+semExtendLua, deadlineLua+semCommonLua+semConfirmLua)
)

// setKey, on each Redlock node, is the node list it serves: canonical
// (nodeSet.list).
const setKey = "lockgw:redlock:set"

// quarantineKey, on a Redlock node, lives while the node is quarantined
// because it was found without a marker: it lost its data (docs/safety.md,
// "Restarted nodes", rule Q). nodeset.lua refuses every grant and extend
// while it exists.
const quarantineKey = "lockgw:redlock:quarantine"

// quarantineReply starts nodeset.lua's answer on a quarantined node,
// followed by the ms it has left.
const quarantineReply = "LOCKGW_QUARANTINE "

// nodesetReply starts the error nodeset.lua answers, followed by the marker.
const nodesetReply = "LOCKGW_NODESET "

type guardedScript struct {
	src    string
	script *redis.Script
}

func guard(plain ...string) map[string]guardedScript {
	m := make(map[string]guardedScript, len(plain))
	for _, src := range plain {
		g := nodesetLua + src
		m[sha1Hex(src)] = guardedScript{src: g, script: redis.NewScript(g)}
	}
	return m
}

func sha1Hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

func init() {
	// The warm-up loads what requests will run.
	redlockScripts = append(redlockScripts, nodesetMarkScript)
	for _, g := range guardedScripts {
		redlockScripts = append(redlockScripts, g.script)
	}
}

// nodeName is how a node is named in a list: host:port/db as configured,
// the host in lower case. Every gateway must spell a node the same way.
func nodeName(o *redis.Options) string {
	addr := o.Addr
	if host, port, err := net.SplitHostPort(addr); err == nil {
		addr = net.JoinHostPort(strings.ToLower(host), port)
	}
	return addr + "/" + strconv.Itoa(o.DB)
}

// nodeSet is a Redlock's node list and what its nodes said of it.
type nodeSet struct {
	list  string   // the names, sorted, joined by ","
	names []string // each node's name, in the order the nodes were given
	kick  chan struct{}

	mu sync.Mutex
	// why the gateway refuses: a node of the list serves another list (or
	// a fresh marking lost to another list). Guarded scripts are then not
	// sent at all, on any node. "" when not refused.
	closed string
	// why is the last reason a node counted for no one ("" when none).
	why string
	// joined: the last marking pass saw a node serve the list and none
	// another, so a node found serving none may be marked at once (rule W,
	// join), by the request that found it.
	joined bool
	// quarantine is how long a join quarantines a node it finds without a
	// marker (rule Q); held is, by node, until when a node said it is
	// quarantined so, for /readyz.
	quarantine time.Duration
	held       map[int]time.Time
}

func newNodeSet(nodes []*redis.Options, names []string, quarantine time.Duration) (*nodeSet, error) {
	s := &nodeSet{kick: make(chan struct{}, 1), quarantine: quarantine}
	if names != nil && len(names) != len(nodes) {
		return nil, fmt.Errorf("lockstore: redlock has %d nodes but %d node names", len(nodes), len(names))
	}
	for i, o := range nodes {
		n := nodeName(o)
		if names != nil {
			n = strings.TrimSpace(names[i])
		}
		if n == "" || strings.ContainsAny(n, ", ") || slices.Contains(s.names, n) {
			return nil, fmt.Errorf("lockstore: redlock node name %q: names must be distinct, not empty, without commas or spaces", n)
		}
		s.names = append(s.names, n)
	}
	s.list = strings.Join(slices.Sorted(slices.Values(s.names)), ",")
	return s, nil
}

// differ names the difference between the list node i serves and ours.
func (s *nodeSet) differ(i int, have string) string {
	if strings.HasPrefix(have, "?") {
		return fmt.Sprintf("Redlock node %s is being marked for the node list [%s] and serves none yet (docs/safety.md, Changing the node list)", s.names[i], strings.ReplaceAll(have[1:], ",", " "))
	}
	if have == "" {
		return fmt.Sprintf("Redlock node %s serves no node list yet: a new deployment marks its nodes once every one of them answers, and a node restarted empty is marked again once a node of the list is seen to serve it (docs/operations.md, Changing the Redlock node list)", s.names[i])
	}
	theirs := strings.Split(have, ",")
	ours := strings.Split(s.list, ",")
	var gone, added []string
	for _, n := range theirs {
		if !slices.Contains(ours, n) {
			gone = append(gone, n)
		}
	}
	for _, n := range ours {
		if !slices.Contains(theirs, n) {
			added = append(added, n)
		}
	}
	return fmt.Sprintf("Redlock node %s was last used with the node list [%s]; this gateway has [%s] (not in this gateway's list: [%s]; only in this gateway's list: [%s]): every gateway must list the same nodes, spelled the same way; to change the list, see docs/operations.md, Changing the Redlock node list",
		s.names[i], strings.Join(theirs, " "), strings.Join(ours, " "), strings.Join(gone, " "), strings.Join(added, " "))
}

// tentative is the list marked by a fresh pass that has not committed it
// yet (rule W): it counts for nobody.
func (s *nodeSet) tentative() string { return "?" + s.list }

// tentativeLife is how long a tentative marker lives: a fresh pass that
// stopped half way (its gateway died) blocks another list's pass no longer.
const tentativeLife = 30 * time.Second

func (s *nodeSet) refusal(why string) error {
	return &RefusedError{Reason: "nodeset", msg: why}
}

// refused records that node i answered with marker have, and returns the
// node's error: it refused, and changed nothing.
func (s *nodeSet) refused(i int, have string) error {
	why := s.differ(i, have)
	s.mu.Lock()
	s.why = why
	unmarked := have == "" || strings.HasPrefix(have, "?") // no list committed: the next pass decides
	if !unmarked {
		s.closed = why
	}
	s.mu.Unlock()
	if unmarked {
		s.wake()
	}
	return s.refusal(why)
}

func (s *nodeSet) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// reason is why a node counted for no one, for QuorumError; "" when every
// node serves the list.
func (s *nodeSet) reason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.why
}

func (s *nodeSet) isJoined() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.joined
}

// refusing is the error of a gateway that knows a node of its list
// serves another list (rule C): not only its grants and extends but its
// reads and releases too are refused, since it would count the nodes of
// a lease over a list the lease was not granted on (a release through it
// would answer 404 for a lease held on the other list's majority).
func (s *nodeSet) refusing() error {
	if why := s.closedWhy(); why != "" {
		return s.refusal(why)
	}
	return nil
}

func (s *nodeSet) closedWhy() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// setGuard is a node's Scripter for requests: the scripts that grant or
// lengthen go out with the node list check in front (nodeset.lua), the
// others as they are.
type setGuard struct {
	redis.Scripter
	set *nodeSet
	i   int // the node's index
}

func (g setGuard) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	s, ok := guardedScripts[sha]
	if !ok {
		return g.Scripter.EvalSha(ctx, sha, keys, args...)
	}
	keys, args = g.append(keys, args)
	return g.run(ctx, func() *redis.Cmd { return g.Scripter.EvalSha(ctx, s.script.Hash(), keys, args...) })
}

// Eval is redis.Script.Run's fallback after NOSCRIPT, with the plain
// script.
func (g setGuard) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	s, ok := guardedScripts[sha1Hex(src)]
	if !ok {
		return g.Scripter.Eval(ctx, src, keys, args...)
	}
	keys, args = g.append(keys, args)
	return g.run(ctx, func() *redis.Cmd { return g.Scripter.Eval(ctx, s.src, keys, args...) })
}

// run makes a guarded call, unless the gateway refuses. When the node
// serves no list (it restarted empty) and the gateway has joined the
// nodes' list, it marks the node and calls once more: the refused call
// changed nothing.
func (g setGuard) run(ctx context.Context, call func() *redis.Cmd) *redis.Cmd {
	if why := g.set.closedWhy(); why != "" {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(g.set.refusal(why))
		return cmd
	}
	cmd := call()
	have, refused := nodesetRefusal(cmd.Err())
	if refused && (have == "" || have == g.set.tentative()) && g.set.isJoined() {
		was, err := g.set.mark(ctx, g.Scripter, "join")
		if err == nil && (was == "" || was == g.set.list || was == g.set.tentative()) {
			cmd = call()
			have, refused = nodesetRefusal(cmd.Err())
		}
	}
	if refused {
		cmd.SetErr(g.set.refused(g.i, have))
	}
	if left, ok := quarantineRefusal(cmd.Err()); ok {
		cmd.SetErr(g.set.quarantined(g.i, left))
	}
	return cmd
}

// mark runs nodeset_mark.lua's op on one node.
func (s *nodeSet) mark(ctx context.Context, c redis.Scripter, op string) (string, error) {
	v, err := nodesetMarkScript.Run(ctx, c, []string{setKey, quarantineKey}, s.list, op,
		tentativeLife.Milliseconds(), s.quarantine.Milliseconds()).Text()
	return v, redisErr(err)
}

// quarantineRefusal is the time nodeset.lua's quarantine refusal says the
// node has left.
func quarantineRefusal(err error) (time.Duration, bool) {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return 0, false
	}
	ms, ok := strings.CutPrefix(rerr.Error(), quarantineReply)
	if !ok {
		return 0, false
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(ms), 10, 64)
	return time.Duration(max(n, 0)) * time.Millisecond, true
}

// quarantined records that node i refused as quarantined for left more
// (rule Q), and returns its error: it answered, and changed nothing.
func (s *nodeSet) quarantined(i int, left time.Duration) error {
	until := time.Now().Add(left)
	s.mu.Lock()
	if s.held == nil {
		s.held = make(map[int]time.Time)
	}
	s.held[i] = until
	why := fmt.Sprintf("Redlock node %s was found without the node list marker (it lost its data, or is new) and is quarantined on the node itself until %s, LOCKGW_MAX_TTL plus 1%% after it was found (docs/safety.md, Restarted nodes)",
		s.names[i], until.UTC().Format(time.RFC3339))
	s.why = why
	s.mu.Unlock()
	return &RefusedError{Reason: "quarantine", msg: why}
}

// heldUntil is until when node i last said it is quarantined (zero when
// it did not, or that has passed).
func (s *nodeSet) heldUntil(i int) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.held[i]; time.Now().Before(t) {
		return t
	}
	return time.Time{}
}

// nodesetRefusal is the marker nodeset.lua's refusal carries.
func nodesetRefusal(err error) (have string, refused bool) {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return "", false
	}
	have, refused = strings.CutPrefix(rerr.Error(), nodesetReply)
	return strings.TrimSpace(have), refused
}

func (g setGuard) append(keys []string, args []any) ([]string, []any) {
	return append(slices.Clip(keys), setKey, quarantineKey), append(slices.Clip(args), g.set.list)
}

// keepSet marks the nodes (markPass; NewRedlock made the first pass)
// whenever a node answers
// that it serves no list, and every second, until the store closes.
func (r *Redlock) keepSet() {
	pause := max(r.nodeTimeout, 100*time.Millisecond)
	for {
		select {
		case <-r.stop:
			return
		case <-time.After(pause): // at most one pass per pause, kicked or not
		}
		select {
		case <-r.stop:
			return
		case <-r.set.kick:
		case <-time.After(time.Second - pause):
		}
		r.markPass(max(2*time.Second, 20*r.nodeTimeout))
	}
}

// markPass reads every node's marker and writes it where rule W of
// docs/safety.md ("Changing the node list") allows: fresh (every node
// answered, none serves a list: a tentative mark on every node, then,
// only if every one took, commit them all; otherwise take them back) or
// join (a node serves ours, none that answered serves another or marks
// one tentatively: commit those that serve none). It closes the gateway
// when a node of the list serves another list, and opens it when none
// does. Each call to a node is bounded by timeout.
func (r *Redlock) markPass(timeout time.Duration) {
	s := r.set
	have, errs := r.runMark(timeout, nil, "read")
	ours, answered, foreign := false, 0, -1
	for i, err := range errs {
		if err != nil {
			continue
		}
		answered++
		switch have[i] {
		case s.list:
			ours = true
		case "", s.tentative():
		default:
			if !strings.HasPrefix(have[i], "?") {
				r.closeSet(s.differ(i, have[i]))
				return
			}
			foreign = i // another list's fresh pass, under way or abandoned
		}
	}
	if foreign >= 0 {
		r.noteSet(fmt.Sprintf("Redlock node %s is being marked for another node list (%s); this gateway has [%s]; it waits for that mark to be committed or to expire (30 s)",
			s.names[foreign], strings.TrimPrefix(have[foreign], "?"), strings.ReplaceAll(s.list, ",", " ")))
		return
	}
	if !ours && answered < len(r.nodes) {
		var silent []string
		for i, err := range errs {
			if err != nil {
				silent = append(silent, s.names[i])
			}
		}
		r.noteSet(fmt.Sprintf("no Redlock node serves this gateway's node list [%s] yet, and [%s] did not answer: a new deployment marks its nodes once every one of them answers",
			strings.ReplaceAll(s.list, ",", " "), strings.Join(silent, " ")))
		return
	}
	empty := make([]bool, len(r.nodes))
	for i, err := range errs {
		empty[i] = err == nil && have[i] != s.list
	}
	if !slices.Contains(empty, true) {
		r.openSet()
		return
	}
	if ours { // join: commit ours on the nodes that have none
		prev, errs := r.runMark(timeout, empty, "join")
		for i := range empty {
			if empty[i] && errs[i] == nil && prev[i] != "" && prev[i] != s.list && prev[i] != s.tentative() {
				r.closeSet(s.differ(i, prev[i]))
				return
			}
		}
		r.log.Info().Str("node_list", s.list).Msg("redlock: marked the nodes that served no node list with this gateway's")
		r.openSet()
		return
	}
	// fresh: every node answered, none serves a list
	prev, errs := r.runMark(timeout, empty, "try")
	lost, complete := -1, true
	for i := range empty {
		switch {
		case errs[i] != nil:
			complete = false
		case prev[i] != "" && prev[i] != s.tentative() && prev[i] != s.list:
			// Another list's mark got there first. (Our own list,
			// committed, is a gateway with our list whose pass got there
			// first: the same marks, not a loss.)
			lost = i
		}
	}
	if lost >= 0 || !complete {
		r.runMark(timeout, empty, "unmark")
		if lost >= 0 && !strings.HasPrefix(prev[lost], "?") {
			r.closeSet(s.differ(lost, prev[lost]))
			return
		}
		r.noteSet(fmt.Sprintf("no Redlock node serves this gateway's node list [%s] yet, and marking every node failed (a node did not answer, or another list's mark got there first): a new deployment marks its nodes once every one of them answers",
			strings.ReplaceAll(s.list, ",", " ")))
		return
	}
	prev, errs = r.runMark(timeout, empty, "commit")
	for i := range empty {
		if errs[i] != nil || (prev[i] != s.tentative() && prev[i] != s.list) {
			// A tentative mark expired or a node went silent: the next
			// pass joins from what was committed, or starts over.
			r.noteSet(fmt.Sprintf("committing this gateway's node list [%s] on every Redlock node did not complete; trying again", strings.ReplaceAll(s.list, ",", " ")))
			return
		}
	}
	r.log.Info().Str("node_list", s.list).Msg("redlock: marked every node, which served no node list, with this gateway's")
	r.openSet()
}

// runMark runs nodeset_mark.lua with op on every node (or those in only),
// over the prober's clients, and returns each marker found.
func (r *Redlock) runMark(timeout time.Duration, only []bool, op string) ([]string, []error) {
	have := make([]string, len(r.nodes))
	errs := make([]error, len(r.nodes))
	var wg sync.WaitGroup
	for i, n := range r.nodes {
		if only != nil && !only[i] {
			errs[i] = errSkipped
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			v, err := r.set.mark(ctx, n.probe, op)
			have[i], errs[i] = v, err
		})
	}
	wg.Wait()
	return have, errs
}

func (r *Redlock) closeSet(why string) {
	s := r.set
	s.mu.Lock()
	changed := s.closed != why
	s.closed, s.why, s.joined = why, why, false
	s.mu.Unlock()
	if changed {
		r.log.Error().Str("node_list", s.list).Msg("redlock: refusing every lock: " + why)
	}
}

func (r *Redlock) noteSet(why string) {
	s := r.set
	s.mu.Lock()
	changed := s.why != why
	s.closed, s.why, s.joined = "", why, false
	s.mu.Unlock()
	if changed {
		r.log.Warn().Str("node_list", s.list).Msg("redlock: " + why)
	}
}

func (r *Redlock) openSet() {
	s := r.set
	s.mu.Lock()
	was := s.closed
	s.closed, s.why, s.joined = "", "", true
	s.mu.Unlock()
	if was != "" {
		r.log.Info().Str("node_list", s.list).Msg("redlock: every Redlock node that answers serves this gateway's node list again")
	}
}

// checkSet is Ping's part for node i: an error unless the gateway is open
// and the node serves its list.
func (r *Redlock) checkSet(ctx context.Context, i int, n *redlockNode) error {
	if why := r.set.closedWhy(); why != "" {
		return r.set.refusal(why)
	}
	have, err := n.client.Get(ctx, setKey).Result()
	if errors.Is(err, redis.Nil) {
		have, err = "", nil
	}
	if err != nil {
		return redisErr(err)
	}
	if have != r.set.list {
		return r.set.refused(i, have)
	}
	return nil
}
