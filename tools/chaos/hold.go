package chaos

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lockgateway/lockgateway/internal/sleep"
	"github.com/lockgateway/lockgateway/lockstore"
)

// Holds are leases held through a stream (a PUT with Accept:
// text/event-stream, docs/api.md "Holding a lock"): the gateway renews the
// lease and tells the holder on the stream, and says lost before the last
// expires_at it told, never after. A Holder plays one hold as a careful
// client does, by what its stream says and by its own clock, and records
// every event with the moment it arrived; CheckHolds judges the records.

// HoldEvent is one event of a hold's stream, as its client received it.
type HoldEvent struct {
	Name   string // acquired, renewed, released, ended, lost
	Reason string // a final event's
	// At is when the event arrived (wall clock, ns since the epoch).
	At int64
	// Expires is the event's expires_at (ns): the lease's end for
	// acquired and renewed, the last end the gateway told for a final
	// event.
	Expires int64
	Fence   int64
}

// final reports whether the event ends a hold.
func (e HoldEvent) final() bool { return e.Name != "acquired" && e.Name != "renewed" }

// Hold is one hold a client asked for and what its stream said.
type Hold struct {
	Client, Gateway int
	Key, Token      string
	TTL             time.Duration // ttl_ms asked for
	// Call is when the PUT was sent.
	Call int64
	// Status is the PUT's answer: 201 or 200 with a stream; 409, 503…; 0
	// when none came.
	Status int
	// Events are what the stream said, acquired first (none when the
	// stream ended before it).
	Events []HoldEvent
	// LetGo is when the holder decided to let go, before its DELETE or
	// before it closed the stream; 0 when the hold ended otherwise first.
	LetGo int64
	// Deleted: the holder let go with a DELETE (else by closing the
	// stream); DeleteStatus is the DELETE's answer (0: none).
	Deleted      bool
	DeleteStatus int
	// Closed is when the stream ended: a final event's arrival, the
	// stream breaking, or the holder closing it.
	Closed int64
	// Broken: the stream ended without a final event, not closed by the
	// holder.
	Broken bool
	// Acts counts the holder's increments of the key's register.
	Acts int
	// Unreadable: the stream began with something other than an acquired
	// event with a fence and an expires_at (a bug in the gateway or the
	// harness).
	Unreadable bool
}

// Granted reports whether the stream began with a readable acquired event.
func (h Hold) Granted() bool {
	return len(h.Events) > 0 && h.Events[0].Name == "acquired" && !h.Unreadable
}

// View is the stretch during which the holder believed it held the key, as
// docs/api.md tells a holder to judge: from the acquired event's arrival
// until the first of a final event's arrival, the stream breaking, the
// holder letting go, and the last expires_at it had been told by then. A
// renewal that arrives after that end does not start the hold again: the
// holder had stopped. ok is false when the hold was never granted or the
// stretch is empty (an acquired event that arrived after its own end).
// ended names what ended it: a final event's name, "expiry", "broken" or
// "let-go".
func (h Hold) View() (from, until int64, ended string, ok bool) {
	if !h.Granted() {
		return 0, 0, "", false
	}
	from, until, ended = h.Events[0].At, h.Events[0].Expires, "expiry"
	for _, ev := range h.Events[1:] {
		if ev.At >= until {
			break
		}
		if ev.final() {
			until, ended = ev.At, ev.Name
			break
		}
		until = max(until, ev.Expires)
	}
	if h.Broken && h.Closed < until {
		until, ended = h.Closed, "broken"
	}
	if h.LetGo != 0 && h.LetGo < until {
		until, ended = h.LetGo, "let-go"
	}
	return from, until, ended, from < until
}

// lastTold is the latest expires_at the holder had been told before event
// i: what a final event must arrive before.
func (h Hold) lastTold(i int) int64 {
	var last int64
	for _, ev := range h.Events[:i] {
		if !ev.final() {
			last = max(last, ev.Expires)
		}
	}
	return last
}

// Final is the stream's final event, if one arrived.
func (h Hold) Final() (HoldEvent, bool) {
	for _, ev := range h.Events {
		if ev.final() {
			return ev, true
		}
	}
	return HoldEvent{}, false
}

// Holder plays holds through a gateway's streams.
type Holder struct {
	http *http.Client
	// Linger is how long a holder whose lease ran out by its own clock
	// (the stream said nothing in time: a stopped gateway) keeps reading
	// the stream, acting no more, to record what the gateway says when it
	// comes back. 0: it closes the stream at once.
	Linger time.Duration
}

// NewHolder returns a Holder with a transport of its own: a stream keeps
// its connection for as long as the hold lasts.
func NewHolder(linger time.Duration) *Holder {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	return &Holder{http: &http.Client{Transport: tr}, Linger: linger}
}

// Close drops idle connections.
func (hr *Holder) Close() { hr.http.CloseIdleConnections() }

// HoldSpec is one hold to play.
type HoldSpec struct {
	Base            string // the gateway's base URL
	Client, Gateway int
	Key             string
	TTL, Wait       time.Duration
	// Register, when set, is incremented (read, then written, with the
	// lease's fence) every Act while the holder believes it holds the key.
	Register *Register
	Act      time.Duration
	// Delete: let go with a DELETE of the token, then read the stream to
	// its end; otherwise by closing the stream.
	Delete bool
}

// Holding is a hold being played.
type Holding struct {
	granted, stopped, done chan struct{}
	letGo                  chan struct{}
	once                   sync.Once
	ok                     bool // granted; set before granted is closed
	rec                    Hold
}

// Granted is closed once the hold was granted (its acquired event arrived)
// or refused.
func (h *Holding) Granted() <-chan struct{} { return h.granted }

// Ok reports whether the hold was granted; only after Granted is closed.
func (h *Holding) Ok() bool { return h.ok }

// Stopped is closed once the holder stopped believing it holds the key
// (its View ended) or the hold was refused.
func (h *Holding) Stopped() <-chan struct{} { return h.stopped }

// Done is closed once the hold's stream is closed.
func (h *Holding) Done() <-chan struct{} { return h.done }

// LetGo asks the holder to let go (a no-op once the hold ended).
func (h *Holding) LetGo() { h.once.Do(func() { close(h.letGo) }) }

// Record is the hold's record; only after Done.
func (h *Holding) Record() Hold { return h.rec }

// Start plays spec's hold: it sends the PUT and holds until asked to let go
// (LetGo) or the stream ends.
func (hr *Holder) Start(spec HoldSpec) *Holding {
	h := &Holding{granted: make(chan struct{}), stopped: make(chan struct{}), done: make(chan struct{}), letGo: make(chan struct{})}
	h.rec = Hold{Client: spec.Client, Gateway: spec.Gateway, Key: spec.Key, Token: lockstore.NewToken(), TTL: spec.TTL}
	go func() {
		defer close(h.done)
		hr.play(spec, h)
	}()
	return h
}

func (hr *Holder) play(spec HoldSpec, h *Holding) {
	rec := &h.rec
	grantedOnce := sync.OnceFunc(func() { close(h.granted) })
	defer grantedOnce()
	stop := sync.OnceFunc(func() { close(h.stopped) })
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := fmt.Sprintf(`{"ttl_ms":%d,"wait_ms":%d,"owner":"c%d"}`, spec.TTL.Milliseconds(), spec.Wait.Milliseconds(), spec.Client)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, spec.Base+"/locks/"+spec.Key, strings.NewReader(body))
	if err != nil {
		panic(err) // a malformed URL: the harness's own mistake
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Lock-Token", rec.Token)
	// Until the acquired event, a deadline: the wait and then some.
	answered := time.AfterFunc(spec.Wait+5*time.Second, cancel)
	rec.Call = now()
	resp, err := hr.http.Do(req)
	if err != nil {
		answered.Stop()
		return
	}
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	if resp.StatusCode/100 != 2 {
		answered.Stop()
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return
	}

	events := make(chan holdRead)
	stopReading := make(chan struct{})
	defer close(stopReading)
	go readHoldEvents(resp.Body, events, stopReading)
	first := <-events
	answered.Stop()
	if first.err != nil {
		rec.Closed, rec.Broken = now(), true
		return
	}
	rec.Events = append(rec.Events, first.ev)
	if first.ev.Name != "acquired" || first.ev.Fence <= 0 || first.ev.Expires == 0 {
		rec.Unreadable = true
		rec.Closed = now()
		return
	}
	h.ok = true
	grantedOnce()

	fence, deadline := first.ev.Fence, first.ev.Expires
	expiry := time.NewTimer(time.Until(time.Unix(0, deadline)))
	defer expiry.Stop()
	var act <-chan time.Time
	if spec.Register != nil && spec.Act > 0 {
		t := time.NewTicker(spec.Act)
		defer t.Stop()
		act = t.C
	}
	var linger <-chan time.Time // set once the lease ran out by the clock
	holding := true
	letGo := h.letGo
	for {
		select {
		case got := <-events:
			if got.err != nil {
				rec.Closed, rec.Broken = now(), true
				return
			}
			rec.Events = append(rec.Events, got.ev)
			if got.ev.final() {
				rec.Closed = got.ev.At
				return
			}
			// (A renewal heard after the holder stopped does not start
			// the hold again.)
			if holding && got.ev.At < deadline && got.ev.Expires > deadline {
				deadline = got.ev.Expires
				expiry.Reset(time.Until(time.Unix(0, deadline)))
			}
		case <-expiry.C:
			if holding {
				// Nothing said in time: the holder stops by its own clock.
				holding = false
				stop()
				if hr.Linger <= 0 {
					rec.Closed = now()
					return
				}
				linger = time.After(hr.Linger)
			}
		case <-linger:
			rec.Closed = now()
			return
		case <-act:
			if holding && now() < deadline {
				if v, ok := spec.Register.Read(fence); ok && now() < deadline {
					spec.Register.Write(fence, v+1)
					rec.Acts++
				}
			}
		case <-letGo:
			letGo = nil
			if !holding {
				// Lingering: nothing to let go of, and what the gateway
				// says when it comes back is still to be heard.
				continue
			}
			holding = false
			rec.LetGo = now()
			stop()
			if !spec.Delete {
				rec.Closed = now()
				return
			}
			rec.Deleted = true
			rec.DeleteStatus = hr.release(spec, rec.Token)
			// The stream says released (or lost) and closes; if it does
			// not, the holder closes it after a while.
			linger = time.After(3 * time.Second)
		}
	}
}

// release sends the DELETE of a hold's token; it returns the status (0:
// no answer).
func (hr *Holder) release(spec HoldSpec, token string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, spec.Base+"/locks/"+spec.Key, nil)
	if err != nil {
		panic(err)
	}
	req.Header.Set("Lock-Token", token)
	resp, err := hr.http.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

type holdRead struct {
	ev  HoldEvent
	err error
}

// readHoldEvents sends the stream's events, each stamped with its arrival,
// until the stream ends (the last one carries the error) or stop is closed.
func readHoldEvents(body io.Reader, out chan<- holdRead, stop <-chan struct{}) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 4096), 64<<10)
	var name string
	var data []string
	send := func(r holdRead) bool {
		select {
		case out <- r:
			return true
		case <-stop:
			return false
		}
	}
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if name != "" {
				at := now()
				ev := parseHoldEvent(name, strings.Join(data, "\n"))
				ev.At = at
				if !send(holdRead{ev: ev}) {
					return
				}
			}
			name, data = "", nil
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			name = value
		case "data":
			data = append(data, value)
		}
	}
	err := sc.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	send(holdRead{err: err})
}

// parseHoldEvent reads an event's data; fields it lacks stay zero.
func parseHoldEvent(name, data string) HoldEvent {
	var b struct {
		Fence     int64  `json:"fence"`
		Reason    string `json:"reason"`
		ExpiresAt string `json:"expires_at"`
	}
	_ = json.Unmarshal([]byte(data), &b)
	ev := HoldEvent{Name: name, Reason: b.Reason, Fence: b.Fence}
	if t, err := time.Parse(time.RFC3339Nano, b.ExpiresAt); err == nil {
		ev.Expires = t.UnixNano()
	}
	return ev
}

// Holds is the records of a run's holds, safe for concurrent holders.
type Holds struct {
	mu    sync.Mutex
	holds []Hold
}

// Add records a hold.
func (hs *Holds) Add(h Hold) {
	hs.mu.Lock()
	hs.holds = append(hs.holds, h)
	hs.mu.Unlock()
}

// All returns a copy of the holds recorded so far.
func (hs *Holds) All() []Hold {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return slices.Clone(hs.holds)
}

// HoldWorkload is clients holding keys through streams. Each client loops:
// hold a random key through a random gateway (waiting for it half the
// time), act on the key's register while it believes it holds it, and let
// go after a while (a DELETE half the time, else by closing the stream),
// or stop when the stream or its own clock says the hold is over.
type HoldWorkload struct {
	Gateways []string
	Keys     []string
	Clients  int
	TTL      time.Duration // ttl_ms of every hold
	Wait     time.Duration // half the holds wait up to this long
	// For is how long a holder keeps a hold at most, from its grant; nil:
	// up to 4 TTLs.
	For       func(*rand.Rand) time.Duration
	Act       time.Duration // between a holder's increments of the register
	Registers map[string]*Register
	Holds     *Holds
	Holder    *Holder
	Seed      uint64
	// Client numbers start here (apart from other workloads').
	FirstClient int
}

// Start runs the clients until ctx ends and returns a function that waits
// for them to let go of what they hold.
func (w *HoldWorkload) Start(ctx context.Context) (wait func()) {
	if w.Registers == nil {
		w.Registers = map[string]*Register{}
	}
	for _, k := range w.Keys {
		if w.Registers[k] == nil {
			w.Registers[k] = NewRegister(true)
		}
	}
	var wg sync.WaitGroup
	for id := range w.Clients {
		r := rand.New(rand.NewPCG(w.Seed, uint64(id)))
		wg.Go(func() { w.client(ctx, w.FirstClient+id, r) })
	}
	return wg.Wait
}

func (w *HoldWorkload) client(ctx context.Context, id int, r *rand.Rand) {
	for ctx.Err() == nil {
		key := w.Keys[r.IntN(len(w.Keys))]
		gw := r.IntN(len(w.Gateways))
		var wait time.Duration
		if w.Wait > 0 && r.IntN(2) == 0 {
			wait = time.Duration(r.Int64N(int64(w.Wait)))
		}
		hold := w.Holder.Start(HoldSpec{
			Base: w.Gateways[gw], Client: id, Gateway: gw, Key: key, TTL: w.TTL, Wait: wait,
			Register: w.Registers[key], Act: w.Act, Delete: r.IntN(2) == 0,
		})
		<-hold.Granted()
		d := time.Duration(r.Int64N(int64(4 * w.TTL)))
		if w.For != nil {
			d = w.For(r)
		}
		select {
		case <-hold.Done():
		case <-time.After(d):
		case <-ctx.Done():
		}
		hold.LetGo()
		<-hold.Done()
		rec := hold.Record()
		w.Holds.Add(rec)
		if !rec.Granted() {
			sleep.For(ctx, 5*time.Millisecond+time.Duration(r.Int64N(int64(25*time.Millisecond))))
		}
	}
}

// CheckHolds judges a run's holds, with the plain leases of ops on the same
// keys:
//
//   - overlap: no two tokens believe they hold a key at once, a hold's
//     belief being its View and a plain lease's what CheckOverlap counts.
//     Pairs of two plain leases are CheckOverlap's, not counted here.
//   - lost-late: every lost event arrived before the last expires_at its
//     holder had been told (the API's promise: lost before the end, never
//     after).
func CheckHolds(holds []Hold, ops []Op) []Violation {
	var out []Violation
	byKey := map[string][]holding{}
	isHold := map[string]bool{}
	for _, h := range holds {
		if from, until, _, ok := h.View(); ok {
			byKey[h.Key] = append(byKey[h.Key], holding{token: h.Token, fence: h.Events[0].Fence, from: from, until: until})
			isHold[h.Token] = true
		}
	}
	for key, hs := range holdings(ops) {
		if _, ok := byKey[key]; ok {
			byKey[key] = append(byKey[key], hs...)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		hs := byKey[key]
		slices.SortFunc(hs, func(a, b holding) int { return cmp.Compare(a.from, b.from) })
		// Every pair, not only the first found: a pair of plain leases
		// that overlap must not hide a hold that overlaps them too.
		seen := map[[2]string]bool{}
		var active []holding
		for _, h := range hs {
			active = slices.DeleteFunc(active, func(a holding) bool { return a.until <= h.from })
			for _, a := range active {
				pair := [2]string{min(a.token, h.token), max(a.token, h.token)}
				if a.token == h.token || seen[pair] || !isHold[a.token] && !isHold[h.token] {
					continue
				}
				seen[pair] = true
				out = append(out, Violation{Checker: "overlap", Key: key, Detail: fmt.Sprintf(
					"%s %s (fence %d) held it until %s, %s %s (fence %d) from %s: %v of overlap",
					kindOf(isHold, a.token), short(a.token), a.fence, stamp(a.until), kindOf(isHold, h.token), short(h.token), h.fence, stamp(h.from),
					time.Duration(min(a.until, h.until)-h.from))})
			}
			active = append(active, h)
		}
	}
	for _, h := range holds {
		for i, ev := range h.Events {
			if ev.Name != "lost" {
				continue
			}
			if told := h.lastTold(i); ev.At >= told {
				out = append(out, Violation{Checker: "lost-late", Key: h.Key, Detail: fmt.Sprintf(
					"hold %s (fence %d, gateway %d) was told lost (%s) at %s, %v after the expires_at it had been told (%s)",
					short(h.Token), ev.Fence, h.Gateway, ev.Reason, stamp(ev.At), time.Duration(ev.At-told), stamp(told))})
			}
		}
	}
	return out
}

func kindOf(isHold map[string]bool, token string) string {
	if isHold[token] {
		return "hold"
	}
	return "lease"
}

// HoldStats sums up a run's holds for its log.
type HoldStats struct {
	Asked, Granted int
	// Ended counts the granted holds by what ended the holder's belief
	// (View): a final event's name with its reason, "expiry", "broken",
	// "let-go".
	Ended map[string]int
	// AfterExpiry counts, for the holds that ended by the holder's clock
	// (the stream said nothing in time), what the stream said next: a
	// final event's name, "renewed", "broken" (closed without a final
	// event) or "nothing" (the holder closed it first).
	AfterExpiry map[string]int
	// Lost counts lost events; LostMargin is the least time by which one
	// came before the end its holder had been told (negative: after), and
	// Latest describes that one.
	Lost       int
	LostMargin time.Duration
	Latest     string
	Acts       int
	Deletes    int // holders that let go with a DELETE
	Unreadable int
}

// StatsOf sums up holds.
func StatsOf(holds []Hold) HoldStats {
	s := HoldStats{Ended: map[string]int{}, AfterExpiry: map[string]int{}}
	for _, h := range holds {
		s.Asked++
		s.Acts += h.Acts
		if h.Unreadable {
			s.Unreadable++
		}
		if h.Deleted {
			s.Deletes++
		}
		if !h.Granted() {
			continue
		}
		s.Granted++
		_, until, ended, _ := h.View()
		if ev, ok := h.Final(); ok && ended == ev.Name {
			ended += " (" + ev.Reason + ")"
		}
		s.Ended[ended]++
		if ended == "expiry" {
			next := "nothing"
			if h.Broken {
				next = "broken"
			}
			for _, ev := range h.Events {
				if ev.At >= until {
					next = ev.Name
					break
				}
			}
			s.AfterExpiry[next]++
		}
		for i, ev := range h.Events {
			if ev.Name == "lost" {
				m := time.Duration(h.lastTold(i) - ev.At)
				if s.Lost == 0 || m < s.LostMargin {
					s.LostMargin = m
					s.Latest = fmt.Sprintf("%s on %s through gateway %d at %s", ev.Reason, h.Key, h.Gateway, stamp(ev.At))
				}
				s.Lost++
			}
		}
	}
	return s
}

func (s HoldStats) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(s.Ended)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, s.Ended[k]))
	}
	var after []string
	for _, k := range slices.Sorted(maps.Keys(s.AfterExpiry)) {
		after = append(after, fmt.Sprintf("%s %d", k, s.AfterExpiry[k]))
	}
	return fmt.Sprintf("%d holds asked, %d granted, %d register increments; ended by: %s; after an end by expiry the stream said: %s; %d lost events, the latest %v before its end (%s)",
		s.Asked, s.Granted, s.Acts, strings.Join(parts, ", "), strings.Join(after, ", "), s.Lost, s.LostMargin.Round(time.Millisecond), s.Latest)
}
