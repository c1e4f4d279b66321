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
	guardedScripts = guard(acquireLua, extendLua, raiseFenceLua,
		semCommonLua+semAcquireLua, semCommonLua+semExtendLua, semCommonLua+semRaiseLua)
)

// setKey, on each Redlock node, is the node list it serves: canonical
// (nodeSet.list).
const setKey = "lockgw:redlock:set"

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
}

func newNodeSet(nodes []*redis.Options) *nodeSet {
	s := &nodeSet{kick: make(chan struct{}, 1)}
	for _, o := range nodes {
		s.names = append(s.names, nodeName(o))
	}
	s.list = strings.Join(slices.Sorted(slices.Values(s.names)), ",")
	return s
}

// differ names the difference between the list node i serves and ours.
func (s *nodeSet) differ(i int, have string) string {
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

func (s *nodeSet) refusal(why string) error {
	return &RefusedError{Reason: "nodeset", msg: why}
}

// refused records that node i answered with marker have, and returns the
// node's error: it refused, and changed nothing.
func (s *nodeSet) refused(i int, have string) error {
	why := s.differ(i, have)
	s.mu.Lock()
	s.why = why
	if have != "" {
		s.closed = why
	}
	s.mu.Unlock()
	if have == "" {
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
	if cmd, closed := g.closed(ctx); closed {
		return cmd
	}
	keys, args = g.append(keys, args)
	return g.check(g.Scripter.EvalSha(ctx, s.script.Hash(), keys, args...))
}

// Eval is redis.Script.Run's fallback after NOSCRIPT, with the plain
// script.
func (g setGuard) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	s, ok := guardedScripts[sha1Hex(src)]
	if !ok {
		return g.Scripter.Eval(ctx, src, keys, args...)
	}
	if cmd, closed := g.closed(ctx); closed {
		return cmd
	}
	keys, args = g.append(keys, args)
	return g.check(g.Scripter.Eval(ctx, s.src, keys, args...))
}

func (g setGuard) append(keys []string, args []any) ([]string, []any) {
	return append(slices.Clip(keys), setKey), append(slices.Clip(args), g.set.list)
}

// closed answers for the node, without asking it, while the gateway
// refuses.
func (g setGuard) closed(ctx context.Context) (*redis.Cmd, bool) {
	why := g.set.closedWhy()
	if why == "" {
		return nil, false
	}
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(g.set.refusal(why))
	return cmd, true
}

// check turns nodeset.lua's refusal into a *RefusedError naming the
// difference.
func (g setGuard) check(cmd *redis.Cmd) *redis.Cmd {
	var rerr redis.Error
	if errors.As(cmd.Err(), &rerr) {
		if have, ok := strings.CutPrefix(rerr.Error(), nodesetReply); ok {
			cmd.SetErr(g.set.refused(g.i, strings.TrimSpace(have)))
		}
	}
	return cmd
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
		ctx, cancel := context.WithTimeout(context.Background(), max(time.Second, 4*r.nodeTimeout))
		r.markPass(ctx)
		cancel()
	}
}

// markPass reads every node's marker and writes it where rule W of
// docs/safety.md ("Changing the node list") allows: fresh (every node
// answered, none serves a list: mark all, or none when one mark finds
// another list) or join (a node serves ours, none that answered serves
// another: mark those that serve none). It closes the gateway when a node
// of the list serves another list, and opens it when none does.
func (r *Redlock) markPass(ctx context.Context) {
	s := r.set
	have, errs := r.runMark(ctx, nil, "read")
	ours, answered := false, 0
	for i, err := range errs {
		if err != nil {
			continue
		}
		answered++
		switch have[i] {
		case s.list:
			ours = true
		case "":
		default:
			r.closeSet(s.differ(i, have[i]))
			return
		}
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
		empty[i] = err == nil && have[i] == ""
	}
	if !slices.Contains(empty, true) {
		r.openSet()
		return
	}
	prev, errs := r.runMark(ctx, empty, "mark")
	lost, complete := -1, true
	for i := range empty {
		switch {
		case !empty[i]:
		case errs[i] != nil:
			complete = false
		case prev[i] != "" && prev[i] != s.list:
			lost = i
		}
	}
	switch {
	case lost >= 0:
		if !ours { // fresh: take back what this pass marked
			r.runMark(context.WithoutCancel(ctx), empty, "unmark")
		}
		r.closeSet(s.differ(lost, prev[lost]))
	case !ours && !complete:
		// A fresh marking must reach every node: a mark that did not
		// answer may have lost to another list.
		r.runMark(context.WithoutCancel(ctx), empty, "unmark")
		r.noteSet(fmt.Sprintf("no Redlock node serves this gateway's node list [%s] yet, and marking every node failed: a new deployment marks its nodes once every one of them answers",
			strings.ReplaceAll(s.list, ",", " ")))
	default:
		r.log.Info().Str("node_list", s.list).Msg("redlock: marked the nodes that served no node list with this gateway's")
		r.openSet()
	}
}

// runMark runs nodeset_mark.lua with op on every node (or those in only),
// over the prober's clients, and returns each marker found.
func (r *Redlock) runMark(ctx context.Context, only []bool, op string) ([]string, []error) {
	have := make([]string, len(r.nodes))
	errs := make([]error, len(r.nodes))
	var wg sync.WaitGroup
	for i, n := range r.nodes {
		if only != nil && !only[i] {
			errs[i] = errSkipped
			continue
		}
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, max(r.nodeTimeout, 250*time.Millisecond))
			defer cancel()
			v, err := nodesetMarkScript.Run(nctx, n.probe, []string{setKey}, r.set.list, op).Text()
			have[i], errs[i] = v, redisErr(err)
		})
	}
	wg.Wait()
	return have, errs
}

func (r *Redlock) closeSet(why string) {
	s := r.set
	s.mu.Lock()
	changed := s.closed != why
	s.closed, s.why = why, why
	s.mu.Unlock()
	if changed {
		r.log.Error().Str("node_list", s.list).Msg("redlock: refusing every lock: " + why)
	}
}

func (r *Redlock) noteSet(why string) {
	s := r.set
	s.mu.Lock()
	changed := s.why != why
	s.closed, s.why = "", why
	s.mu.Unlock()
	if changed {
		r.log.Warn().Str("node_list", s.list).Msg("redlock: " + why)
	}
}

func (r *Redlock) openSet() {
	s := r.set
	s.mu.Lock()
	was := s.closed
	s.closed, s.why = "", ""
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
