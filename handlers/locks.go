// Package handlers turns HTTP requests into lockstore calls and their results
// into responses: one maker per endpoint, strict decoding and validation, and
// the one table (problem.go) that maps errors to problem+json.
package handlers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-playground/validator/v10"
	"github.com/rs/zerolog"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/problem"
)

// Limits are the service's bounds on requests.
type Limits struct {
	DefaultTTL     time.Duration // lease length when a request names none
	MaxTTL         time.Duration // longest lease
	MaxWait        time.Duration // longest wait_ms
	MaxBodyBytes   int64         // request body limit
	BackendTimeout time.Duration // deadline for one store call
	// MaxLocksPerUser caps the live locks of one user (0: no cap). User
	// says whom a request's locks count against; ok false means the client
	// cannot be identified (a malformed X-Forwarded-For from a trusted
	// proxy). Needed with a cap.
	MaxLocksPerUser int
	User            func(r *http.Request) (user string, ok bool)
	// HoldTTL is a hold's lease length when its request names none (see
	// hold.go): short, since it bounds how long a key outlives a gateway
	// that died while holding it. MaxHold caps every hold (0: no cap).
	HoldTTL, MaxHold time.Duration
	// Waits bounds the acquires that wait at once (nil: no bound).
	Waits *Waits
}

// Locks serves /locks/{key}. Build it with NewLocks.
type Locks struct {
	store    lockstore.Store
	limits   Limits
	log      zerolog.Logger
	validate *validator.Validate
	stopping <-chan struct{}
	// shutdown ends when stopping closes: a waiting acquire hangs its
	// cancel on it (context.AfterFunc) instead of a goroutine of its own,
	// since 10 000 waiters would otherwise be 10 000 more stacks.
	shutdown context.Context
	obs      Observer
	hub      *LockHub // watchers' (watch.go)
	renewer  *renewer // holds' renewals (hold_renewer.go)
	// open are the holds of locks and permits whose streams are open here
	// (hold_open.go).
	open *openHolds
	// conns are the holds served on their connections, taken over from
	// net/http (hold_conn.go); nil: none is.
	conns *HoldConns
}

// Observer hears what the lock endpoints do, for metrics. Its methods must
// be quick: they run on the request's path. Tokens are passed so an
// observer can match a release to its grant; they must not be kept or shown.
type Observer interface {
	// Acquired: outcome is acquired, renewed, held, over_quota, full,
	// too_many_waiters, unavailable or error.
	Acquired(outcome string, took time.Duration, waited bool)
	Granted(token string, expires time.Time)
	Extended(token string, expires time.Time)
	Released(token string)
	// LockGone: an extend or release (op) found the lock gone.
	LockGone(op string)
	// BackendError: the backend did not answer op.
	BackendError(op string)
	// Refused: the backend refused op's write, for reason (see
	// lockstore.RefusedError).
	Refused(op, reason string)
	// HoldStarted and HoldEnded: a hold's stream began, and ended for
	// reason (hold.go: released, max-hold, shutdown, client-gone,
	// backend-unavailable, expired, taken, forced).
	HoldStarted()
	HoldEnded(reason string)
	// ForcedRelease: user released a lease (kind lock or permit) by force.
	// Users come from the API keys file, so they are a bounded set.
	ForcedRelease(user, kind string)
	// PermitAcquired: a permit acquire ended with outcome (permitOutcome)
	// after took, waiting included. PermitOp: a permit extend or release
	// (op), a hold's renewals included, ended with outcome
	// (permitOpOutcome).
	PermitAcquired(outcome string, took time.Duration)
	PermitOp(op, outcome string)
}

type nopObserver struct{}

func (nopObserver) Acquired(string, time.Duration, bool) {}
func (nopObserver) Granted(string, time.Time)            {}
func (nopObserver) Extended(string, time.Time)           {}
func (nopObserver) Released(string)                      {}
func (nopObserver) LockGone(string)                      {}
func (nopObserver) BackendError(string)                  {}
func (nopObserver) Refused(string, string)               {}
func (nopObserver) HoldStarted()                         {}
func (nopObserver) HoldEnded(string)                     {}
func (nopObserver) ForcedRelease(string, string)         {}
func (nopObserver) PermitAcquired(string, time.Duration) {}
func (nopObserver) PermitOp(string, string)              {}

// NewLocks returns the lock endpoints over store. When stopping closes
// (the server is shutting down) waiting acquires give up at once.
// A wait is also capped by limits.MaxWait.
// obs may be nil.
func NewLocks(store lockstore.Store, limits Limits, log zerolog.Logger, stopping <-chan struct{}, obs Observer) *Locks {
	if obs == nil {
		obs = nopObserver{}
	}
	shutdown := context.Background() // never done: nothing hangs on it
	if stopping != nil {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-stopping
			cancel()
		}()
		shutdown = ctx
	}
	return &Locks{store: store, limits: limits, log: log, validate: newValidator(limits), stopping: stopping, shutdown: shutdown, obs: obs,
		hub: lockstore.NewLockHub(store, limits.BackendTimeout), renewer: newRenewer(store, cmp.Or(limits.BackendTimeout, 5*time.Second)), open: newOpenHolds()}
}

// leaseBody is the body of a grant or an extension.
type leaseBody struct {
	Key       string `json:"key"`
	Token     string `json:"token"`
	Fence     int64  `json:"fence"`
	Owner     string `json:"owner,omitempty"`
	TTLms     int64  `json:"ttl_ms"`
	ExpiresAt string `json:"expires_at"`
}

func newLeaseBody(l lockstore.Lease) leaseBody {
	return leaseBody{Key: l.Key, Token: l.Token, Fence: l.Fence, Owner: l.Owner, TTLms: l.Granted.Milliseconds(), ExpiresAt: timestamp(l.ExpiresAt)}
}

// timestamp renders t in RFC 3339, UTC, with milliseconds, rounded down so
// the rendered expiry is never later than the real one. Digit by digit:
// time.Format's layout interpreter cost a tenth of the gateway's own work
// on an acquire (BenchmarkCycle in server/). Years of other than four
// digits, which no lease reaches, go to Format.
func timestamp(t time.Time) string {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 1000 || year > 9999 {
		return t.Truncate(time.Millisecond).Format(timestampLayout)
	}
	hour, minute, sec := t.Clock()
	var b [24]byte // 2006-01-02T15:04:05.000Z
	digits := func(at, n, v int) {
		for i := at + n - 1; i >= at; i-- {
			b[i] = byte('0' + v%10)
			v /= 10
		}
	}
	digits(0, 4, year)
	b[4] = '-'
	digits(5, 2, int(month))
	b[7] = '-'
	digits(8, 2, day)
	b[10] = 'T'
	digits(11, 2, hour)
	b[13] = ':'
	digits(14, 2, minute)
	b[16] = ':'
	digits(17, 2, sec)
	b[19] = '.'
	digits(20, 3, t.Nanosecond()/int(time.Millisecond))
	b[23] = 'Z'
	return string(b[:])
}

const timestampLayout = "2006-01-02T15:04:05.000Z07:00"

// Acquire serves PUT /locks/{key}: take a lease, waiting up to wait_ms.
func (h *Locks) Acquire() http.Handler { return serveAcquire(h.acquireLock) }

type acquireLockRequest struct {
	TTLms  *int64  `json:"ttl_ms" validate:"omitnil,gte=10,maxttl"`
	WaitMs *int64  `json:"wait_ms" validate:"omitnil,gte=0,maxwait"`
	Owner  *string `json:"owner" validate:"omitnil,max=128,printable"`
	// The key stays held this long after the grant, whatever releases
	// it sooner (docs/safety.md, rule L).
	HoldAtLeastMs *int64 `json:"hold_at_least_ms" validate:"omitnil,gte=1,maxttl"`
	// A hold's own (Accept: text/event-stream; hold.go).
	MaxHoldMs   *int64 `json:"max_hold_ms" validate:"omitnil,gte=1"`
	LockDelayMs *int64 `json:"lock_delay_ms" validate:"omitnil,gte=0,maxttl"`
}

// acquireLock answers an acquire, or starts its hold and returns it for
// the handler to run.
func (h *Locks) acquireLock(w http.ResponseWriter, r *http.Request) *holdStream {
	var req acquireLockRequest
	key, token, err := h.parse(w, r, false, &req)
	if err != nil {
		WriteError(w, r, h.log, err)
		return nil
	}
	holding := wantsStream(r)
	if err := holdFields(holding, req.MaxHoldMs, req.LockDelayMs); err != nil {
		WriteError(w, r, h.log, err)
		return nil
	}
	ar := lockstore.AcquireRequest{TTL: h.ttl(holding, req.TTLms)}
	if h.limits.MaxLocksPerUser > 0 {
		user, ok := h.limits.User(r)
		if !ok {
			WriteError(w, r, h.log, errUnidentified)
			return nil
		}
		ar.Quota = lockstore.Quota{User: user, Max: h.limits.MaxLocksPerUser}
	}
	// ours: a token the client cannot learn unless we answer. No other
	// request has it, so the store finding it already held (Renewed) can
	// only mean one of this request's own tries was granted and its answer
	// lost, then tried again (a waiting acquire's try past the backend
	// timeout): a new grant, 201, which abandonment must release
	// (found by review: it was answered 200, with no Location).
	ours := token == ""
	if ours {
		token = lockstore.NewToken()
	}
	ar.Token = token
	if req.Owner != nil {
		ar.Owner = *req.Owner
	}
	ar.HoldAtLeast = millis(req.HoldAtLeastMs)
	if ar.Wait, err = h.wait(w, r, req.WaitMs); err != nil {
		WriteError(w, r, h.log, err)
		return nil
	}

	start := time.Now()
	lease, err := h.acquire(r.Context(), key, ar)
	if ours {
		lease.Renewed = false // a token of ours is new (above)
	}
	outcome := acquireOutcome(lease, err)
	// A waiting acquire refused a place to wait never waited.
	h.obs.Acquired(outcome, time.Since(start), ar.Wait > 0 && outcome != "too_many_waiters")
	if refused, ok := errors.AsType[*lockstore.RefusedError](err); ok {
		h.obs.Refused("acquire", refused.Reason)
	}
	release := func(ctx context.Context) error {
		return h.store.Release(lockstore.WithUser(ctx, ar.Quota.User), key, token)
	}
	if h.answered(w, r, err, ours, lease.Renewed, token, "lock", release) {
		return nil
	}
	h.obs.Granted(token, lease.ExpiresAt)
	status := grantHeaders(w, LocksPrefix, key, token, lease.Renewed)
	if holding {
		return h.holdLock(w, r, status, lease, ar.Quota.User, holdOptions{maxHold: millis(req.MaxHoldMs), lockDelay: millis(req.LockDelayMs), atLeast: millis(req.HoldAtLeastMs)})
	}
	encodeLease(w, status, newLeaseBody(lease))
	return nil
}

// millis is an optional request field in ms as a duration (0 when absent).
func millis(ms *int64) time.Duration {
	if ms == nil {
		return 0
	}
	return time.Duration(*ms) * time.Millisecond
}

// holdFields refuses a hold's own fields in a PUT that does not hold.
func holdFields(holding bool, fields ...*int64) error {
	if holding {
		return nil
	}
	names := []string{"max_hold_ms", "lock_delay_ms"}
	var e *Error // made only when refusing: every plain acquire passes here
	for i, f := range fields {
		if f == nil {
			continue
		}
		if e == nil {
			e = newError(problem.Validation, "the request has values out of range; see errors")
		}
		e.Fields = append(e.Fields, FieldError{Field: names[i], Message: "applies only to a hold (a PUT with Accept: text/event-stream)"})
	}
	if e == nil {
		return nil
	}
	return e
}

// grantHeaders sets the headers of a grant of a lock or a permit (the
// kind's URL prefix): its token as ETag, and for a new grant (201, else
// 200 for a renewal, which it returns) its URL as Location.
func grantHeaders(w http.ResponseWriter, prefix, key, token string, renewed bool) (status int) {
	if renewed {
		w.Header()[hdrETag] = []string{`"` + token + `"`}
		return http.StatusOK
	}
	// One allocation for both values, as in writeBody.
	v := []string{`"` + token + `"`, prefix + escapeKey(key)}
	w.Header()[hdrETag], w.Header()[hdrLocation] = v[0:1:1], v[1:2:2]
	return http.StatusCreated
}

// wait is how long an acquire or a long-poll may wait: wait_ms from the
// body, else the Prefer: wait=<seconds> header (RFC 7240), capped at
// MaxWait. When it honours the header it says so in w's
// Preference-Applied, and varies on Prefer.
func (h *Locks) wait(w http.ResponseWriter, r *http.Request, waitMs *int64) (time.Duration, error) {
	if waitMs != nil {
		return time.Duration(*waitMs) * time.Millisecond, nil
	}
	secs, ok, err := preferWait(r.Header[hdrPrefer])
	if err != nil || !ok {
		return 0, err
	}
	wait := h.limits.MaxWait
	if secs < int64(wait/time.Second) { // compare first: secs·1e9 may overflow
		wait = time.Duration(secs) * time.Second
	}
	w.Header()[hdrPreferenceAppl] = []string{"wait=" + strconv.Itoa(int(wait/time.Second))}
	w.Header()[hdrVary] = append(w.Header()[hdrVary], hdrPrefer)
	return wait, nil
}

// preferWait finds wait=<seconds> among Prefer headers. Other preferences
// are not ours to refuse; a malformed wait is.
func preferWait(values []string) (secs int64, ok bool, _ error) {
	for _, v := range values {
		for pref := range strings.SplitSeq(v, ",") {
			name, val, _ := strings.Cut(strings.TrimSpace(pref), "=")
			if !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			val, _, _ = strings.Cut(val, ";") // parameters, none defined for wait
			n, err := strconv.ParseInt(strings.Trim(strings.TrimSpace(val), `"`), 10, 64)
			if err != nil || n < 0 {
				return 0, false, newError(problem.Malformed, "Prefer: wait must be a whole number of seconds, as in Prefer: wait=30")
			}
			return n, true, nil
		}
	}
	return 0, false, nil
}

// acquire asks the store, which waits up to req.Wait in line with the other
// waiters for key.
func (h *Locks) acquire(ctx context.Context, key string, req lockstore.AcquireRequest) (lockstore.Lease, error) {
	return acquireWaiting(ctx, h, "lock wait", req.Wait, func(ctx context.Context) (lockstore.Lease, error) {
		return h.store.Acquire(ctx, key, req)
	})
}

func acquireOutcome(lease lockstore.Lease, err error) string {
	switch {
	case err == nil && lease.Renewed:
		return "renewed"
	case err == nil:
		return "acquired"
	case errors.Is(err, lockstore.ErrHeld):
		return "held"
	case errors.Is(err, lockstore.ErrUserQuota):
		return "over_quota"
	case errors.Is(err, lockstore.ErrStoreFull):
		return "full"
	case isKind(err, problem.TooManyWaiters):
		return "too_many_waiters"
	case errors.Is(err, lockstore.ErrUnavailable), errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, errShuttingDown):
		return "unavailable"
	}
	return "error"
}

// isKind reports whether err is a problem of kind k that a handler or
// middleware decided on.
func isKind(err error, k problem.Kind) bool {
	e, ok := errors.AsType[*Error](err)
	return ok && e.Kind == k
}

func (h *Locks) observeFailure(op string, err error) {
	refused, isRefused := errors.AsType[*lockstore.RefusedError](err)
	switch {
	case errors.Is(err, lockstore.ErrNotHeld):
		h.obs.LockGone(op)
	case isRefused:
		h.obs.Refused(op, refused.Reason)
	case errors.Is(err, lockstore.ErrUnavailable):
		h.obs.BackendError(op)
	}
}

// outcomeUnknown: the store did not answer in time, so a grant may have
// been made (or still be on its way) that the caller was not told of.
func outcomeUnknown(err error) bool {
	if _, ours := errors.AsType[*Error](err); ours { // shutting down: nothing in flight
		return false
	}
	return errors.Is(err, lockstore.ErrUnavailable) && !errors.Is(err, lockstore.ErrRefused) ||
		errors.Is(err, context.DeadlineExceeded)
}

// Extend serves PATCH /locks/{key}: reset the TTL of a lease the caller holds.
func (h *Locks) Extend() http.Handler {
	type request struct {
		TTLms *int64 `json:"ttl_ms" validate:"omitnil,gte=10,maxttl"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req request
		key, token, err := h.parse(w, r, true, &req)
		if err != nil {
			WriteError(w, r, h.log, err)
			return
		}
		// No ttl_ms: 0, the lease's own length (the store reads it
		// atomically with the extend), never the service default.
		var ttl time.Duration
		if req.TTLms != nil {
			ttl = time.Duration(*req.TTLms) * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(h.userHint(r), h.limits.BackendTimeout)
		defer cancel()
		lease, err := h.store.Extend(ctx, key, token, ttl)
		if err != nil {
			h.observeFailure("extend", err)
			WriteError(w, r, h.log, err)
			return
		}
		h.obs.Extended(token, lease.ExpiresAt)
		w.Header()[hdrETag] = []string{`"` + token + `"`}
		encodeLease(w, http.StatusOK, newLeaseBody(lease))
	})
}

// Release serves DELETE /locks/{key}: free a lease the caller holds, or
// with force=true any lease, for a key's administrator (force.go).
func (h *Locks) Release() http.Handler {
	forcer, _ := h.store.(lockstore.Forcer)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		force, fence, err := forceQuery(r)
		if err != nil {
			WriteError(w, r, h.log, err)
			return
		}
		if force {
			h.forceRelease(w, r, forcer, false, fence)
			return
		}
		key, token, err := h.keyAndToken(r, true)
		if err != nil {
			WriteError(w, r, h.log, err)
			return
		}
		ctx, cancel := context.WithTimeout(h.userHint(r), h.limits.BackendTimeout)
		defer cancel()
		if err := h.store.Release(ctx, key, token); err != nil {
			h.observeFailure("release", err)
			WriteError(w, r, h.log, err)
			return
		}
		h.obs.Released(token)
		h.open.released(false, key, token)
		w.WriteHeader(http.StatusNoContent)
	})
}

// Inspect serves GET /locks/{key}: who holds a lock, never with its
// token, with an ETag naming the state; with If-None-Match a conditional
// GET or a long-poll, with Accept: text/event-stream a stream (watch.go).
func (h *Locks) Inspect() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, plain := h.routeGet(w, r, h.stream, h.conditional)
		if !plain {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), h.limits.BackendTimeout)
		defer cancel()
		l, err := h.store.Inspect(ctx, key)
		if err != nil && !errors.Is(err, lockstore.ErrNotHeld) {
			WriteError(w, r, h.log, err)
			return
		}
		h.writeState(w, r, key, lockstore.LockState{Held: err == nil, Lease: l}, l.Left)
	})
}

// routeGet reads the key of a GET of a lock or a semaphore and serves it
// when it asks for a stream or is conditional (If-None-Match), by the
// kind's stream or conditional, or when either is malformed. plain says a
// plain GET of key is left to answer.
func (h *Locks) routeGet(w http.ResponseWriter, r *http.Request, stream func(w http.ResponseWriter, r *http.Request, key string),
	conditional func(w http.ResponseWriter, r *http.Request, key string, tags []string, star bool),
) (key string, plain bool) {
	key, err := KeyFromPath(r)
	if err != nil {
		WriteError(w, r, h.log, err)
		return "", false
	}
	if wantsStream(r) {
		stream(w, r, key)
		return "", false
	}
	tags, star, isConditional, err := ifNoneMatch(r)
	if err != nil {
		WriteError(w, r, h.log, err)
		return "", false
	}
	if isConditional {
		conditional(w, r, key, tags, star)
		return "", false
	}
	return key, true
}

// errUnidentified refuses an acquire whose client cannot be identified
// while locks are counted per user: it would count against nobody, or
// share a count where one client could use up everybody's.
var errUnidentified = newError(problem.Malformed, "the client could not be identified, so its locks cannot be counted: "+
	"a trusted proxy sent a malformed X-Forwarded-For, or a user header that is not exactly one name")

// userHint is r's context, telling the store whom the caller's locks
// probably count against: with per-user caps, a lock counts against the
// user who took it, whoever extends or releases it, and the hint only
// saves the store a round trip. An extend or a release is never refused
// for want of an identity.
func (h *Locks) userHint(r *http.Request) context.Context {
	if h.limits.MaxLocksPerUser > 0 {
		if user, ok := h.limits.User(r); ok {
			return lockstore.WithUser(r.Context(), user)
		}
	}
	return r.Context()
}

// keyAndToken reads the key and the caller's token. For extend and release
// (requireToken) the token is mandatory: 428 without one.
func (h *Locks) keyAndToken(r *http.Request, requireToken bool) (key, token string, err error) {
	if key, err = KeyFromPath(r); err != nil {
		return "", "", err
	}
	if token, err = tokenFromHeaders(r, requireToken); err != nil {
		return "", "", err
	}
	if requireToken && token == "" {
		return "", "", newError(problem.TokenRequired, `send the lock's token as Lock-Token: <token> or If-Match: "<token>"`)
	}
	return key, token, nil
}

// parse reads key, token and body, in the order their errors are reported:
// a bad key or token before a bad body.
func (h *Locks) parse(w http.ResponseWriter, r *http.Request, requireToken bool, body any) (key, token string, err error) {
	if key, token, err = h.keyAndToken(r, requireToken); err != nil {
		return "", "", err
	}
	return key, token, h.decodeValid(w, r, body)
}

func (h *Locks) decodeValid(w http.ResponseWriter, r *http.Request, dst any) error {
	if err := decode(w, r, h.limits.MaxBodyBytes, dst); err != nil {
		return err
	}
	err := h.validate.Struct(dst)
	verrs, ok := errors.AsType[validator.ValidationErrors](err)
	if !ok {
		return err
	}
	e := newError(problem.Validation, "the request has values out of range; see errors")
	for _, fe := range verrs {
		e.Fields = append(e.Fields, FieldError{Field: fe.Field(), Message: h.fieldMessage(fe)})
	}
	return e
}

func (h *Locks) fieldMessage(fe validator.FieldError) string {
	switch fe.Tag() {
	case "gte":
		return "must be at least " + fe.Param()
	case "lte":
		return "must be at most " + fe.Param()
	case "required":
		return "is required"
	case "maxttl":
		return fmt.Sprintf("must be at most %d (the server's maximum TTL)", h.limits.MaxTTL.Milliseconds())
	case "maxwait":
		return fmt.Sprintf("must be at most %d (the server's maximum wait)", h.limits.MaxWait.Milliseconds())
	case "max":
		return "must be at most " + fe.Param() + " characters"
	case "printable":
		return "must hold only printable characters"
	}
	return "is not valid (" + fe.Tag() + ")"
}

// newValidator knows the configured bounds and names fields as JSON does.
func newValidator(limits Limits) *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		return name
	})
	must := func(err error) {
		if err != nil {
			panic(err) // a tag registered twice: a programming error
		}
	}
	must(v.RegisterValidation("maxttl", func(fl validator.FieldLevel) bool {
		return fl.Field().Int() <= limits.MaxTTL.Milliseconds()
	}))
	must(v.RegisterValidation("maxwait", func(fl validator.FieldLevel) bool {
		return fl.Field().Int() <= limits.MaxWait.Milliseconds()
	}))
	must(v.RegisterValidation("printable", func(fl validator.FieldLevel) bool {
		s := fl.Field().String()
		return utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0
	}))
	return v
}

// escapeKey escapes each segment of key for a URL path, keeping the "/"s.
// A key of unreserved characters and "/" only (most keys) is its own
// escaping: it is returned as is, without splitting and joining it.
func escapeKey(key string) string {
	if plainPath(key) {
		return key
	}
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// plainPath: s holds only RFC 3986 unreserved characters and "/", none of
// which url.PathEscape ever escapes.
func plainPath(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '.', c == '_', c == '~', c == '/':
		default:
			return false
		}
	}
	return true
}
