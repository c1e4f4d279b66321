package middleware

import (
	"net/http"
	"sync"
)

// A detached request goes on after its handler returns: a hold whose
// connection the handler took over from net/http (http.Hijacker) and
// serves on another goroutine, so that net/http's goroutine and buffers
// for it can go (handlers/hold_conn.go). What AccessLog, Observe and Trace
// record when the handler returns (a duration, the bytes written, the
// span's end) would then be the hold's start, not its end: for a detached
// request they record it when its handler calls End, once, with the whole
// duration and everything written.

// Detached is a request whose handler called Detach.
type Detached struct {
	mu      sync.Mutex
	ended   bool
	written int64 // the body bytes written after Detach (End's)
	records []func(written int64)
}

// Detach marks r's request as detached and returns it, or nil when r did
// not come through RequestID, which keeps the mark: the handler must then
// finish the response before it returns. Call it before the handler
// returns, and End once the response is over.
func Detach(r *http.Request) *Detached {
	rid, _ := r.Context().Value(requestIDKey{}).(*requestID)
	if rid == nil {
		return nil
	}
	rid.detached = &Detached{}
	return rid.detached
}

// End is the detached request's end: written is the body bytes written
// since Detach (the middlewares saw those before it). The middlewares'
// records run now, those that have yet to register (their handler has
// not returned) as they do.
func (d *Detached) End(written int64) {
	d.mu.Lock()
	if d.ended {
		d.mu.Unlock()
		return
	}
	d.ended, d.written = true, written
	records := d.records
	d.records = nil
	d.mu.Unlock()
	for _, record := range records {
		record(written)
	}
}

// detached is r's Detached, or nil when its handler did not detach it.
func detached(r *http.Request) *Detached {
	if rid, ok := r.Context().Value(requestIDKey{}).(*requestID); ok {
		return rid.detached
	}
	return nil
}

// atEnd runs record at the request's end: at once when End came already
// (the response may end before the middlewares above the handler run).
// Records run in the order they come, the innermost middleware's first,
// as they would have when the handler returned.
func (d *Detached) atEnd(record func(written int64)) {
	d.mu.Lock()
	if !d.ended {
		d.records = append(d.records, record)
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	record(d.written)
}
