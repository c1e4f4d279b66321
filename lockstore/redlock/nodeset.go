package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/redis/go-redis/v9"
)

func init() {
	// The warm-up loads what requests will run.
	redlockScripts = append(redlockScripts, script.NodesetMarkScript)
	for _, g := range script.GuardedScripts {
		redlockScripts = append(redlockScripts, g.Script)
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
	names []string // each node's name, by node index
	// prev is the previous list during a transition (docs/safety.md, rule
	// T), canonical as list; "" otherwise. inPrev says which nodes are in
	// it, inList which are in list (a node of both is one node).
	prev           string
	inPrev, inList []bool
	kick           chan struct{}

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
	// settle is how long a transition's settle key lives (rule T): the
	// longest lease plus drift. finished: a node carries the new list, so
	// the transition is done (only a finish writes it first).
	settle   time.Duration
	finished bool
	// maxTTL is this gateway's longest lease (LOCKGW_MAX_TTL), which the
	// nodes it votes on must know (maxTTLKey).
	maxTTL time.Duration
	// retired: a node serves a transition away from this gateway's list
	// (rule T): it never counts again, nor marks anything.
	retired bool
	// onFinish runs once, when this transition gateway first sees the
	// transition finished: from then on it counts by the new list alone.
	onFinish func()
}

// newNodeSet names the nodes of the list (names, or each node's
// host:port/db) and, during a transition, of the previous list, and
// returns with it every node the Redlock talks to: the list's, then the
// previous list's that are not in it by name.
func newNodeSet(nodes []*redis.Options, names []string, prev []*redis.Options, prevNames []string, quarantine time.Duration) (*nodeSet, []*redis.Options, error) {
	s := &nodeSet{kick: make(chan struct{}, 1), quarantine: quarantine}
	listNames, err := nameNodes(nodes, names, "")
	if err != nil {
		return nil, nil, err
	}
	all := slices.Clone(nodes)
	s.names = listNames
	s.list = canonical(listNames)
	s.inList = make([]bool, len(nodes))
	for i := range s.inList {
		s.inList[i] = true
	}
	if prev == nil {
		return s, all, nil
	}
	prevNames, err = nameNodes(prev, prevNames, "previous ")
	if err != nil {
		return nil, nil, err
	}
	s.prev = canonical(prevNames)
	if s.prev == s.list {
		return nil, nil, errors.New("lockstore: the previous Redlock node list is the node list itself: a transition changes the list")
	}
	s.inPrev = make([]bool, len(nodes))
	for i, n := range prevNames {
		if j := slices.Index(listNames, n); j >= 0 {
			s.inPrev[j] = true
			continue
		}
		all = append(all, prev[i])
		s.names = append(s.names, n)
		s.inPrev = append(s.inPrev, true)
		s.inList = append(s.inList, false)
	}
	return s, all, nil
}

// nameNodes is each node's name in a list: names[i], or its host:port/db.
func nameNodes(nodes []*redis.Options, names []string, which string) ([]string, error) {
	if names != nil && len(names) != len(nodes) {
		return nil, fmt.Errorf("lockstore: redlock has %d %snodes but %d node names", len(nodes), which, len(names))
	}
	var out []string
	for i, o := range nodes {
		n := nodeName(o)
		if names != nil {
			n = strings.TrimSpace(names[i])
		}
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("lockstore: redlock %snode %s is listed twice: each node once, under one name", which, n)
		}
		if n == "" || strings.ContainsAny(n, ", >?") {
			return nil, fmt.Errorf("lockstore: redlock %snode name %q: names must not be empty, nor hold commas, spaces, '>' or '?'", which, n)
		}
		out = append(out, n)
	}
	return out, nil
}

func canonical(names []string) string {
	return strings.Join(slices.Sorted(slices.Values(names)), ",")
}

// transition reports whether this gateway is a transition gateway (rule T).
func (s *nodeSet) transition() bool { return s.prev != "" }

// marker is the marker this gateway's scripts run under (rule C): its
// list, or during a transition "O>N".
func (s *nodeSet) marker() string {
	if s.transition() {
		return s.prev + ">" + s.list
	}
	return s.list
}

// also is the second marker a transition gateway's scripts run under: the
// new list, once a transition gateway finished (rule T); "" for others.
func (s *nodeSet) also() string {
	if s.transition() {
		return s.list
	}
	return ""
}

// accepts reports whether a node carrying have counts for this gateway.
func (s *nodeSet) accepts(have string) bool {
	return have == s.marker() || (s.transition() && have == s.list)
}

// pending reports whether a node carrying have will count for this
// gateway without any other gateway's list changing: it carries no list
// yet, or a tentative one, or a transition toward this gateway's list not
// finished yet, or (for a transition gateway) the previous list, which
// its next pass turns into the transition.
func (s *nodeSet) pending(have string) bool {
	switch {
	case have == "", strings.HasPrefix(have, "?"):
		return true
	case s.transition():
		return have == s.prev
	}
	_, to, ok := strings.Cut(have, ">")
	return ok && to == s.list
}

// differ names the difference between the list node i serves and ours.
func (s *nodeSet) differ(i int, have string) string {
	if from, to, ok := strings.Cut(have, ">"); ok && !s.transition() {
		if to == s.list {
			return fmt.Sprintf("Redlock node %s is in a transition from the node list [%s] to this gateway's [%s], and serves this gateway's list once it finished: LOCKGW_MAX_TTL plus 1%% after it began, done by a gateway with LOCKGW_REDLOCK_PREVIOUS_URLS (keep one running until then; docs/operations.md, Changing the Redlock node list)",
				s.names[i], strings.ReplaceAll(from, ",", " "), strings.ReplaceAll(to, ",", " "))
		}
		if from == s.list {
			return fmt.Sprintf("Redlock node %s is in a transition from this gateway's node list [%s] to [%s], begun by a gateway with LOCKGW_REDLOCK_PREVIOUS_URLS: this gateway has the old list, which counts no more; stop it (docs/operations.md, Changing the Redlock node list)",
				s.names[i], strings.ReplaceAll(from, ",", " "), strings.ReplaceAll(to, ",", " "))
		}
	}
	if s.transition() && have == s.prev {
		return fmt.Sprintf("Redlock node %s still serves the previous node list [%s]; this gateway begins the transition to [%s] on it at its next marking pass", s.names[i], strings.ReplaceAll(s.prev, ",", " "), strings.ReplaceAll(s.list, ",", " "))
	}
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
	if s.transition() {
		return fmt.Sprintf("Redlock node %s was last used with the node list [%s]; this gateway changes the list from [%s] to [%s] (not in this gateway's new list: [%s]; only in this gateway's new list: [%s]): the previous list must be the one the nodes serve; see docs/operations.md, Changing the Redlock node list",
			s.names[i], strings.ReplaceAll(have, ",", " "), strings.ReplaceAll(s.prev, ",", " "), strings.Join(ours, " "), strings.Join(gone, " "), strings.Join(added, " "))
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
	return &lockstore.RefusedError{Reason: "nodeset", Msg: why}
}

// refused records that node i answered with marker have, and returns the
// node's error: it refused, and changed nothing.
func (s *nodeSet) refused(i int, have string) error {
	why := s.differ(i, have)
	s.mu.Lock()
	s.why = why
	unmarked := s.pending(have) // the next pass decides
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
	s, ok := script.GuardedScripts[sha]
	if !ok {
		return g.Scripter.EvalSha(ctx, sha, keys, args...)
	}
	keys, args = g.append(keys, args)
	return g.run(ctx, func() *redis.Cmd { return g.Scripter.EvalSha(ctx, s.Script.Hash(), keys, args...) })
}

// Eval is redis.Script.Run's fallback after NOSCRIPT, with the plain
// script.
func (g setGuard) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	s, ok := script.GuardedScripts[script.Sha1Hex(src)]
	if !ok {
		return g.Scripter.Eval(ctx, src, keys, args...)
	}
	keys, args = g.append(keys, args)
	return g.run(ctx, func() *redis.Cmd { return g.Scripter.Eval(ctx, s.Src, keys, args...) })
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
	if isMaxTTLRefusal(cmd.Err()) {
		// The node does not know this gateway's longest lease yet (a new
		// node, or one that lost its data): record it, and call again.
		if _, _, err := g.set.mark(ctx, g.Scripter, g.i, "read"); err == nil {
			cmd = call()
		}
	}
	have, refused := nodesetRefusal(cmd.Err())
	if refused && (have == "" || have == g.set.tentative()) && g.set.isJoined() {
		was, _, err := g.set.mark(ctx, g.Scripter, g.i, g.set.joinOp())
		if err == nil && (was == "" || g.set.accepts(was) || was == g.set.tentative()) {
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

// mark runs nodeset_mark.lua's op on node i, and returns the marker and
// the settle key's PTTL (-2: none) it found.
func (s *nodeSet) mark(ctx context.Context, c redis.Scripter, i int, op string) (string, int64, error) {
	// The settle key lives as long as a quarantine: the longest lease plus
	// drift. (With the restart guard off, for tests' controls, the
	// quarantine is 0 and the settle is not.)
	return script.NodesetMark(ctx, c, script.NodesetMarkArgs{List: s.list, Op: op, Tentative: tentativeLife,
		Quarantine: s.quarantine, Prev: s.prev, InPrev: s.transition() && s.inPrev[i], Settle: s.settle, MaxTTL: s.maxTTL})
}

// joinOp is how a node found without a marker is marked once the gateway
// has joined the nodes' list: "join" (our list), or for a transition
// gateway "begin" (the transition), or "join" once it finished (the new
// list).
func (s *nodeSet) joinOp() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.transition() && !s.finished {
		return "begin"
	}
	return "join"
}

// isMaxTTLRefusal: nodeset.lua refused because the node does not know the
// caller's longest lease yet.
func isMaxTTLRefusal(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), script.MaxTTLReply)
}

// quarantineRefusal is the time nodeset.lua's quarantine refusal says the
// node has left.
func quarantineRefusal(err error) (time.Duration, bool) {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return 0, false
	}
	ms, ok := strings.CutPrefix(rerr.Error(), script.QuarantineReply)
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
	return &lockstore.RefusedError{Reason: "quarantine", Msg: why}
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
	have, refused = strings.CutPrefix(rerr.Error(), script.NodesetReply)
	return strings.TrimSpace(have), refused
}

func (g setGuard) append(keys []string, args []any) ([]string, []any) {
	return append(slices.Clip(keys), script.SetKey, script.QuarantineKey, script.MaxTTLKey), append(slices.Clip(args), g.set.marker(), g.set.also(), g.set.maxTTL.Milliseconds())
}

// keepSet marks the nodes (markPass; NewRedlock made the first pass)
// whenever a node answers
// that it serves no list, and every second, until the store closes.
func (r *Store) keepSet() {
	pause := max(r.nodeTimeout, 100*time.Millisecond)
	for {
		select {
		case <-r.stopped.Done():
			return
		case <-time.After(pause): // at most one pass per pause, kicked or not
		}
		select {
		case <-r.stopped.Done():
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
func (r *Store) markPass(timeout time.Duration) {
	if r.set.transition() {
		r.transitionPass(timeout)
		return
	}
	s := r.set
	s.mu.Lock()
	retired := s.retired
	s.mu.Unlock()
	if retired {
		return // closed for good (rule T)
	}
	have, _, errs := r.runMark(timeout, nil, "read")
	ours, answered, foreign, toward := false, 0, -1, -1
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
			switch {
			case s.pending(have[i]):
				toward = i // a transition toward our list, not finished
			case !strings.HasPrefix(have[i], "?"):
				if from, _, ok := strings.Cut(have[i], ">"); ok && from == s.list {
					// A transition away from this list began: this gateway
					// counts no more, ever, and marks nothing (rule T: a
					// node of the list restarted empty must not get it back).
					s.mu.Lock()
					s.retired = true
					s.mu.Unlock()
				}
				r.closeSet(s.differ(i, have[i]))
				return
			default:
				foreign = i // another list's fresh pass, under way or abandoned
			}
		}
	}
	if toward >= 0 && !ours {
		r.noteSet(s.differ(toward, have[toward]))
		return
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
		empty[i] = err == nil && (have[i] == "" || have[i] == s.tentative())
	}
	if !slices.Contains(empty, true) {
		r.openSet()
		return
	}
	if ours { // join: commit ours on the nodes that have none
		prev, _, errs := r.runMark(timeout, empty, "join")
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
	prev, _, errs := r.runMark(timeout, empty, "try")
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
	prev, _, errs = r.runMark(timeout, empty, "commit")
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
// over the prober's clients, and returns each marker found and each
// settle key's PTTL (-2: none).
func (r *Store) runMark(timeout time.Duration, only []bool, op string) ([]string, []int64, []error) {
	have := make([]string, len(r.nodes))
	settle := make([]int64, len(r.nodes))
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
			have[i], settle[i], errs[i] = r.set.mark(ctx, n.probe, i, op)
		})
	}
	wg.Wait()
	return have, settle, errs
}

// transitionPass is markPass for a transition gateway (docs/safety.md,
// rule T): begin on the nodes that serve the previous list (or none), and
// once a majority of the previous list's nodes have served the transition
// with their settle keys gone, finish: the new list on its nodes.
func (r *Store) transitionPass(timeout time.Duration) {
	s := r.set
	have, settle, errs := r.runMark(timeout, nil, "read")
	ours := false // a node serves the previous list, the transition or the new list
	settled := make([]bool, len(r.nodes))
	for i, err := range errs {
		if err != nil {
			continue
		}
		switch have[i] {
		case "":
		case s.prev:
			if !s.inPrev[i] {
				r.closeSet(s.differ(i, have[i]))
				return
			}
			ours = true
		case s.marker():
			ours = true
			settled[i] = s.inPrev[i] && settle[i] == -2
		case s.list:
			// Only a finish writes the new list on a node of the previous
			// one, once a majority of it had settled; a node given it by
			// a join since (it lost its data) has no settle key either.
			ours = true
			settled[i] = s.inPrev[i] && settle[i] == -2
		default:
			if strings.HasPrefix(have[i], "?") {
				r.noteSet(fmt.Sprintf("Redlock node %s is being marked for another node list (%s); this gateway waits for that mark to be committed or to expire (30 s)", s.names[i], strings.TrimPrefix(have[i], "?")))
				return
			}
			r.closeSet(s.differ(i, have[i]))
			return
		}
	}
	if !ours {
		r.noteSet(fmt.Sprintf("no Redlock node that answered serves the previous node list [%s], the transition from it or the new list [%s]: a transition starts from nodes that serve the previous list",
			strings.ReplaceAll(s.prev, ",", " "), strings.ReplaceAll(s.list, ",", " ")))
		return
	}
	s.mu.Lock()
	first := !s.finished && newQuorumList(s.inPrev).count(settled) >= newQuorumList(s.inPrev).need
	s.finished = s.finished || first
	finished := s.finished
	s.mu.Unlock()
	if first && s.onFinish != nil {
		s.onFinish()
	}
	begin := make([]bool, len(r.nodes))  // the previous list, or none: the transition
	join := make([]bool, len(r.nodes))   // none, once finished: the new list
	finish := make([]bool, len(r.nodes)) // the transition, once finished: the new list
	for i, err := range errs {
		switch {
		case err != nil:
		case have[i] == "" && finished:
			join[i] = true
		case have[i] == "" || have[i] == s.prev:
			begin[i] = true
		case have[i] == s.marker() && finished && s.inList[i]:
			finish[i] = true
		}
	}
	for _, step := range []struct {
		op   string
		only []bool
	}{{"begin", begin}, {"join", join}, {"finish", finish}} {
		if !slices.Contains(step.only, true) {
			continue
		}
		prev, _, errs := r.runMark(timeout, step.only, step.op)
		for i := range step.only {
			if step.only[i] && errs[i] == nil && prev[i] != have[i] && !s.accepts(prev[i]) {
				// Another gateway's mark got there in between; the next
				// pass reads it.
				r.noteSet(s.differ(i, prev[i]))
				return
			}
		}
		r.log.Info().Str("node_list", s.list).Str("previous_node_list", s.prev).
			Msg("redlock: node list transition: " + step.op + " on the nodes that needed it")
	}
	r.openSet()
}

func (r *Store) closeSet(why string) {
	s := r.set
	s.mu.Lock()
	changed := s.closed != why
	s.closed, s.why, s.joined = why, why, false
	s.mu.Unlock()
	if changed {
		r.log.Error().Str("node_list", s.list).Msg("redlock: refusing every lock: " + why)
	}
}

func (r *Store) noteSet(why string) {
	s := r.set
	s.mu.Lock()
	changed := s.why != why
	s.closed, s.why, s.joined = "", why, false
	s.mu.Unlock()
	if changed {
		r.log.Warn().Str("node_list", s.list).Msg("redlock: " + why)
	}
}

func (r *Store) openSet() {
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
// and the node serves its list and keeps no quarantine of its own: a node
// quarantined on itself (rule Q) refuses every grant (nodeset.lua reads
// the same key), so Ping counts it as quarantined, as a request's vote
// does, and Nodes shows until when.
func (r *Store) checkSet(ctx context.Context, i int, n *redlockNode) error {
	if why := r.set.closedWhy(); why != "" {
		return r.set.refusal(why)
	}
	have, err := n.client.Get(ctx, script.SetKey).Result()
	if errors.Is(err, redis.Nil) {
		have, err = "", nil
	}
	if err != nil {
		return script.RedisErr(err)
	}
	if !r.set.accepts(have) {
		return r.set.refused(i, have)
	}
	left, err := n.client.PTTL(ctx, script.QuarantineKey).Result()
	if err != nil {
		return script.RedisErr(err)
	}
	if left != -2 { // -2: no key; nodeset.lua refuses on anything else
		return r.set.quarantined(i, max(left, 0))
	}
	return nil
}
