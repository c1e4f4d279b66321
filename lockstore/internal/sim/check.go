package sim

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

// Grace: a client stops 1 ms before expires_at. The node keeps expiries
// in ms (a permit is dropped once TIME's ms reaches its expiry) while the
// gateway's start has µs: the last sub-millisecond is not promised.
const Grace = 1000

// Request is one client request: what the workload sends, and, once it
// is answered, what the client was told.
type Request struct {
	ID       int
	Client   int
	Gw       int
	Kind     string // acquire, extend, release
	Key      string
	Sem      bool
	Token    string
	TTL      time.Duration
	AtLeast  time.Duration // a lock acquire's HoldAtLeast (rule L)
	Batch    bool          // an extend sent as a hold renewer's batch (Batched)
	Sent     int64
	answered int64
	Answer   string // 201, 200, 204, 404, 409 …, 503, 500 …
	Fence    int64
	Expires  int64 // for 201/200: until when the client may rely on its answer, µs

	// Snapshots at the send, for the fence checks.
	otherFence  int64  // the highest fence answered to another token
	otherToken  string // … and to whom
	ownFence    int64  // the highest fence answered to this token (0: none)
	seqActive   bool   // the token held the key (a sequential retry)
	seqFence    int64
	seqUntil    int64
	seqGrantReq int
}

// interval is a token's holding of a key, as an answer told it.
type interval struct {
	token    string
	from, to int64
	req      *Request
}

// holding is a token's lease on a key, for the fence checks.
type holding struct {
	fence int64
	until int64
	req   int
}

// keyHist is one key's history.
type keyHist struct {
	name     string
	Sem      bool
	Limit    int
	iv       []interval
	releases map[string][]int64
	maxFence map[string]int64
	session  map[string]*holding
	trace    []traceEvent
}

// traceEvent is one line of a trace.
type traceEvent struct {
	at  int64
	msg string
}

// Violation is a checker's finding.
type Violation struct {
	Check string // one-holder, limit, fence-unique, fence-order, retry-fence, at-least, error
	at    int64
	key   string
	msg   string
}

// History is a run's requests and their answers, and its checkers. What
// a client was told is all they look at (and the nodes' log, for the
// trace):
//
//   - one holder: a client holds a lock from an answer that granted or
//     extended it (201/200) until the expires_at it was given (Request's
//     Expires: on the redis model the told one, rule E; on Redlock the
//     stronger send + ttl), less Grace, or until it sends a release,
//     whichever comes first; two tokens never hold one lock at once;
//   - the limit: at most limit tokens hold permits of one semaphore at once;
//   - fences unique: permits held at once by two tokens carry two fences;
//   - fences increase: a new grant (201) sent after another token's grant
//     was answered gets a higher fence; one sent after the same token's grant
//     was answered gets no lower a fence (a new grant, 201, a higher one);
//   - a sequential same-token retry keeps its fence: an acquire sent while
//     the token holds the key (after its grant's answer, before its expiry,
//     no release in between) and answered before that expiry gets the same
//     fence;
//   - "a 204 never removes a later grant" is the one-holder check: a grant
//     answered after a release was sent is a new holding, which a late
//     delete that removed it would leave open to a second holder;
//   - hold at least (rule L): a new grant (201) of an acquire with
//     hold_at_least_ms = M, whose token asked the same M on every PUT of
//     the key sent before that answer (but PUTs whose leases a 204
//     release of the token let go before the grant was sent, letGo),
//     keeps the key from every other
//     token until M after the grant, whatever released it sooner: no other
//     token's acquire sent after that answer is granted before then (less
//     Grace and the 1% the nodes' clocks may run fast, A3; the grant's
//     start is taken as its send, before any of its writes). With a TTL
//     shorter than M that is promised only once its holder let go: a
//     release of its token answered 204, sent while the lease was live as
//     the token had been told, with no other lease of the token in between
//     (releasedFirst; a holder that lets its lease run out keeps the key
//     only until it ends).
//
// Clients send a release only when nothing else of theirs is outstanding,
// so every answer after a release's send is to a request sent after it.
type History struct {
	// Latest: a client believes the expiry of its latest answer, not the
	// latest of all its answers (a weaker promise, what a client before
	// rule V1 could count on; a control uses it to show it finds a late
	// write, not a shorter answer).
	Latest bool
	// OwnFences: no checks of what a token is answered against its own
	// earlier answers (retry-fence, extend-fence, and fence-order within
	// one token); the order across holders stays checked. On Redlock a
	// lease's values can disagree on its fence (a renewal whose write-back
	// was not needed leaves a new vote unconfirmed on a minority): an
	// extend then answers the fence most of its nodes carry, a retry
	// re-granted on fewer than q nodes of the first fence is answered
	// 201, with it or above it, and a permit's retry whose write-back finds
	// a counter past its fence raises it. docs/safety.md ("Retries")
	// scopes the promise so; docs/api.md does not
	// (lockstore/redlock: TestSimRedlockStrictFences).
	OwnFences  bool
	Keys       map[string]*keyHist
	Violations []Violation
	digests    map[string]string // digest → token, for the trace
	Reqs       []*Request
	global     []traceEvent
}

// NewHistory returns an empty History.
func NewHistory() *History {
	return &History{Keys: map[string]*keyHist{}, digests: map[string]string{}}
}

// Key is name's history, made on first use: a semaphore's when sem, with
// its limit.
func (h *History) Key(name string, sem bool, limit int) *keyHist {
	k := h.Keys[name]
	if k == nil {
		k = &keyHist{name: name, Sem: sem, Limit: limit, releases: map[string][]int64{},
			maxFence: map[string]int64{}, session: map[string]*holding{}}
		h.Keys[name] = k
	}
	return k
}

// Note adds a line to the trace of key (with no such key, to every
// trace around its time).
func (h *History) Note(at int64, key, format string, args ...any) {
	e := traceEvent{at: at, msg: fmt.Sprintf(format, args...)}
	if k := h.Keys[key]; k != nil {
		k.trace = append(k.trace, e)
		return
	}
	h.global = append(h.global, e)
}

// Violate records a finding of check.
func (h *History) Violate(check string, at int64, key, format string, args ...any) {
	h.Violations = append(h.Violations, Violation{Check: check, at: at, key: key, msg: fmt.Sprintf(format, args...)})
}

// TokenOf is the token whose digest the nodes store, for the trace.
func (h *History) TokenOf(digest string) string {
	if t, ok := h.digests[digest]; ok {
		return t
	}
	return digest[:min(8, len(digest))]
}

// Sent records a request as it leaves its client, with the snapshots the
// fence checks compare its answer to.
func (h *History) Sent(now int64, r *Request, limit int) {
	h.Reqs = append(h.Reqs, r)
	r.ID = len(h.Reqs)
	r.Sent = now
	h.digests[script.DigestHex(r.Token)] = r.Token
	k := h.Key(r.Key, r.Sem, limit)
	switch r.Kind {
	case "acquire":
		for tok, f := range k.maxFence {
			if tok != r.Token && (f > r.otherFence || f == r.otherFence && tok < r.otherToken) {
				r.otherFence, r.otherToken = f, tok
			}
		}
		r.ownFence = k.maxFence[r.Token]
		if s := k.session[r.Token]; s != nil && s.until > now {
			r.seqActive, r.seqFence, r.seqUntil, r.seqGrantReq = true, s.fence, s.until, s.req
		}
	case "release":
		k.releases[r.Token] = append(k.releases[r.Token], now)
		delete(k.session, r.Token)
	}
	h.Note(now, r.Key, "c%d → gw%d  #%d %s tok=%s%s", r.Client, r.Gw, r.ID, r.Kind, r.Token, ttlNote(r))
}

func ttlNote(r *Request) string {
	if r.Kind == "release" {
		return ""
	}
	return fmt.Sprintf(" ttl=%v", r.TTL)
}

// Answered records a request's answer and runs the online checks.
func (h *History) Answered(now int64, r *Request) {
	r.answered = now
	k := h.Keys[r.Key]
	detail := ""
	if r.Answer == "201" || r.Answer == "200" {
		detail = fmt.Sprintf(" fence=%d expires=+%s", r.Fence, Dur(r.Expires-now))
	}
	h.Note(now, r.Key, "gw%d → c%d  #%d %s%s", r.Gw, r.Client, r.ID, r.Answer, detail)
	if strings.HasPrefix(r.Answer, "500") {
		h.Violate("error", now, r.Key, "#%d %s answered %s", r.ID, r.Kind, r.Answer)
	}
	if r.Answer != "201" && r.Answer != "200" {
		return
	}
	if r.Expires-Grace > now {
		k.iv = append(k.iv, interval{token: r.Token, from: now, to: r.Expires - Grace, req: r})
	}
	if r.Kind != "acquire" {
		if s := k.session[r.Token]; s != nil && s.until > r.Sent {
			// An extend of a lease the token held when it was sent: the
			// same lease, the same fence (docs/api.md).
			if r.Fence != s.fence && !h.OwnFences {
				h.Violate("extend-fence", now, r.Key, "#%d, an extend of tok %s sent while it held the key with fence %d (granted by #%d), answered fence %d",
					r.ID, r.Token, s.fence, s.req, r.Fence)
			}
			s.until = max(s.until, r.Expires)
		} else if r.Expires > now {
			// The token's lease had ended when this extend was sent, and it
			// found a lease of the token all the same: one granted by a PUT
			// of the token answered 503, "outcome unknown", that landed
			// after (docs/api.md, Safe retries). Its fence is that grant's.
			k.session[r.Token] = &holding{fence: r.Fence, until: r.Expires, req: r.ID}
		}
		return
	}
	// A renewal (200) keeps its fence, which a permit granted to another
	// token since may exceed: the order is between new grants.
	if r.Answer == "201" && r.otherToken != "" && r.Fence <= r.otherFence {
		h.Violate("fence-order", now, r.Key, "#%d (tok %s) answered fence %d, not above fence %d answered to tok %s before #%d was sent",
			r.ID, r.Token, r.Fence, r.otherFence, r.otherToken, r.ID)
	}
	if r.ownFence > 0 && !h.OwnFences && (r.Fence < r.ownFence || (r.Answer == "201" && r.Fence == r.ownFence)) {
		h.Violate("fence-order", now, r.Key, "#%d (tok %s) answered %s with fence %d after the same token was answered fence %d",
			r.ID, r.Token, r.Answer, r.Fence, r.ownFence)
	}
	if r.seqActive && now < r.seqUntil-Grace && r.Fence != r.seqFence && !h.OwnFences {
		h.Violate("retry-fence", now, r.Key, "#%d, a retry of tok %s sent while it held the key with fence %d (granted by #%d, until +%s), answered %s with fence %d",
			r.ID, r.Token, r.seqFence, r.seqGrantReq, Dur(r.seqUntil-r.Sent), r.Answer, r.Fence)
	}
	k.maxFence[r.Token] = max(k.maxFence[r.Token], r.Fence)
	if s := k.session[r.Token]; s != nil && s.until > now {
		s.fence, s.until, s.req = r.Fence, max(s.until, r.Expires), r.ID
	} else if r.Expires > now {
		k.session[r.Token] = &holding{fence: r.Fence, until: r.Expires, req: r.ID}
	}
}

// nodeRan logs a script's run on a node in the trace of its key.
func (h *History) nodeRan(now int64, c *scriptCall, name string, r Reply, late bool) {
	key := KeyOf(c.keys)
	tok := ""
	if len(c.args) > 0 {
		if d, ok := c.args[0].(string); ok && len(d) == 64 {
			tok = " tok=" + h.TokenOf(d)
		}
	}
	when := ""
	if late {
		when = fmt.Sprintf("  LATE: sent %s ago, its gateway gave up", Dur(now-c.sentAt))
	}
	h.Note(now, key, "  node runs %s for #%d%s → %s%s", name, c.op.Req.ID, tok, h.Short(r), when)
}

// Short writes a node's reply for the trace, with tokens for digests.
func (h *History) Short(r Reply) string {
	if r.Err != nil {
		return "error " + r.Err.Error()
	}
	s := fmt.Sprint(r.Val)
	for d, t := range h.digests {
		s = strings.ReplaceAll(s, d, t)
	}
	if len(s) > 100 {
		s = s[:100] + "…"
	}
	return s
}

// Check runs the interval checks (one holder, limit, hold at least) over
// the whole history, after the run: a holding ends at the first release
// its token sent after it began.
func (h *History) Check() {
	h.checkAtLeast()
	names := make([]string, 0, len(h.Keys))
	for n := range h.Keys {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		k := h.Keys[n]
		iv := make([]interval, 0, len(k.iv))
		next := map[string]int64{} // token → when its next answer came
		for i := len(k.iv) - 1; i >= 0; i-- {
			v := &k.iv[i]
			if t, ok := next[v.token]; ok && h.Latest && t < v.to {
				v.to = t
			}
			next[v.token] = v.from
		}
		for _, v := range k.iv {
			for _, t := range k.releases[v.token] {
				if t >= v.from && t < v.to {
					v.to = t
					break
				}
			}
			if v.to > v.from {
				iv = append(iv, v)
			}
		}
		sort.SliceStable(iv, func(i, j int) bool { return iv[i].from < iv[j].from })
		var active []interval
		for _, v := range iv {
			keep := active[:0]
			for _, a := range active {
				if a.to > v.from {
					keep = append(keep, a)
				}
			}
			active = append(keep, v)
			holders := map[string]interval{}
			for _, a := range active {
				if old, ok := holders[a.token]; !ok || a.to > old.to {
					holders[a.token] = a
				}
			}
			// No two permits carry one fence (docs/safety.md, "Fences of
			// permits"): holders at once are told different fences.
			if k.Sem {
				for _, a := range active {
					if a.token != v.token && a.req.Fence == v.req.Fence {
						h.Violate("fence-unique", v.from, n, "tok %s (#%d %s) and tok %s (#%d %s) hold permits at once with one fence, %d",
							a.token, a.req.ID, a.req.Answer, v.token, v.req.ID, v.req.Answer, v.req.Fence)
						break
					}
				}
			}
			limit := 1
			if k.Sem {
				limit = k.Limit
			}
			if len(holders) > limit {
				var parts []string
				for _, a := range active {
					parts = append(parts, fmt.Sprintf("tok %s (#%d %s, fence %d, told it holds until +%s)",
						a.token, a.req.ID, a.req.Answer, a.req.Fence, Dur(a.to+Grace-v.from)))
				}
				check := "one-holder"
				if k.Sem {
					check = "limit"
				}
				h.Violate(check, v.from, n, "%d holders at once, limit %d: %s", len(holders), limit, strings.Join(parts, "; "))
				break
			}
		}
	}
}

// checkAtLeast is the hold-at-least check (rule L; see History): a lock's
// new grant whose acquire asked for hold_at_least_ms keeps the key from
// every other token's acquire sent after its answer until the grant's
// start plus that long.
func (h *History) checkAtLeast() {
	grants := map[string][]*Request{}           // by key
	asked := map[string]map[string][]*Request{} // by key, then token: every acquire
	for _, r := range h.Reqs {
		if r.Kind != "acquire" || r.Sem {
			continue
		}
		if asked[r.Key] == nil {
			asked[r.Key] = map[string][]*Request{}
		}
		asked[r.Key][r.Token] = append(asked[r.Key][r.Token], r)
		if r.Answer == "201" || r.Answer == "200" {
			grants[r.Key] = append(grants[r.Key], r)
		}
	}
	for key, gs := range grants {
		for _, g := range gs {
			// Checked where the promise is docs/api.md's: a lease shorter
			// than M keeps the key only until it ends when its holder lets
			// it run out; and a PUT answered for a lease another PUT of the
			// token made (a renewal, or on Redlock a 201 for the lease an
			// earlier PUT left, its answer lost, or a twin's) keeps that
			// lease's end, so the promise is a 201's own only where every
			// PUT of its token on the key sent before its answer asked the
			// same (the workload draws each PUT's apart, twins' and
			// retries' too), leaving out PUTs whose leases the token let
			// go before g was sent: a 204 release sent after such a PUT's
			// answer and answered before g's send. What that release left
			// on a minority of nodes is no lease, and g's 201 is its own
			// (docs/safety.md, rule L: a release passes on the longest
			// time to T that its reads found, so a copy without T that g
			// renewed lingers as g's others do).
			if g.Answer != "201" || g.AtLeast <= 0 || g.TTL < g.AtLeast && !h.releasedFirst(g) {
				continue
			}
			mixed := false
			for _, r := range asked[key][g.Token] {
				mixed = mixed || r.Sent < g.answered && r.AtLeast != g.AtLeast && !h.letGo(r, g)
			}
			if mixed {
				continue
			}
			// The grant's writes come after its send, each node's end T
			// after them by M of that node's clock.
			until := g.Sent + g.AtLeast.Microseconds() - Grace - g.AtLeast.Microseconds()/100
			for _, o := range gs {
				if o.Token != g.Token && o.Sent > g.answered && o.answered < until {
					h.Violate("at-least", o.answered, key, "#%d (tok %s) granted %s before the end of #%d's hold_at_least_ms %v (tok %s, fence %d): %s early",
						o.ID, o.Token, o.Answer, g.ID, g.AtLeast, g.Token, g.Fence, Dur(until-o.answered))
					break
				}
			}
		}
	}
}

// letGo says whether r's token released the key with a 204 sent after r
// was answered and answered before g was sent. A token is one client's,
// which sends after it heard an answer, at the same instant or later: an
// equal time is after.
func (h *History) letGo(r, g *Request) bool {
	if r.answered == 0 {
		return false // never answered: it may still be writing
	}
	rel := h.firstRelease(r.Key, r.Token, r.answered)
	return rel != nil && rel.answered <= g.Sent
}

// firstRelease is the first release of token on key (a lock's) answered
// 204 and sent at or after from, or nil. h.Reqs is in the order sent, and
// a token's requests follow one another (twins aside, never releases).
func (h *History) firstRelease(key, token string, from int64) *Request {
	for _, r := range h.Reqs {
		if r.Kind == "release" && !r.Sem && r.Key == key && r.Token == token && r.Answer == "204" && r.Sent >= from {
			return r
		}
	}
	return nil
}

// releasedFirst says whether g's holder let go of g's lease: its token
// sent a release, answered 204, while the lease was live as the token had
// been told (g's expiry, moved on by renewals and extends answered with
// g's fence), with no other lease of the token in between (a 201, or a 200
// with another fence: a twin's or a retry's lease). A release sent after
// the lease ran out is of another lease, if any: the holder let g run out,
// and g keeps the key only until it ended. (Seed 2031 of the redis model,
// -sim.first 2000: a lease run out, then a twin's new lease, answered 503
// to one twin and 200 to the other, released with a 204.)
func (h *History) releasedFirst(g *Request) bool {
	rel := h.firstRelease(g.Key, g.Token, g.answered)
	if rel == nil {
		return false
	}
	until := g.Expires
	for _, r := range h.Reqs {
		if r == g || r.Sem || r.Key != g.Key || r.Token != g.Token || r.Kind == "release" {
			continue
		}
		granted := r.Answer == "201" || r.Answer == "200"
		if r.Sent < g.answered {
			// A twin or retry sent with g: a new lease of its own answered
			// before the release was sent.
			if granted && r.Fence != g.Fence && r.answered > g.answered && r.answered < rel.Sent {
				return false
			}
			continue
		}
		if r.Sent >= rel.Sent {
			break
		}
		if r.Sent > until {
			return false // g had run out: what came after is another lease
		}
		if r.Answer == "201" || r.Answer == "200" && r.Fence != g.Fence {
			return false
		}
		if granted {
			until = max(until, r.Expires)
		}
	}
	return rel.Sent <= until
}

// First is the earliest violation.
func (h *History) First() *Violation {
	var f *Violation
	for i := range h.Violations {
		if f == nil || h.Violations[i].at < f.at {
			f = &h.Violations[i]
		}
	}
	return f
}

// TraceOf is the last events of v's key up to its time (and a little
// after): the short replayable story of the failure.
func (h *History) TraceOf(v *Violation, base int64, n int) string {
	k := h.Keys[v.key]
	if k == nil {
		return ""
	}
	var ev []traceEvent
	for _, e := range k.trace {
		if e.at <= v.at+1000 {
			ev = append(ev, e)
		}
	}
	for _, e := range h.global {
		if e.at <= v.at+1000 && e.at >= v.at-2_000_000 {
			ev = append(ev, e)
		}
	}
	sort.SliceStable(ev, func(i, j int) bool { return ev[i].at < ev[j].at })
	if len(ev) > n {
		ev = ev[len(ev)-n:]
	}
	var b strings.Builder
	for _, e := range ev {
		fmt.Fprintf(&b, "  %12.3f ms  %s\n", float64(e.at-base)/1000, e.msg)
	}
	return b.String()
}
