package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Change is one change of a watched lock (Watch).
type Change struct {
	// Event is "acquired", "extended", "released" or "expired".
	Event string
	// ID is the event's id; Watch sends the last one when it reconnects,
	// so the gateway skips what was already seen.
	ID string
	// Lock is the holder after an acquired or extended (as Inspect shows
	// it); after a released or expired, the grant that ended: Key, Owner
	// and Fence (0 when the stream opened on a free lock whose last holder
	// the gateway did not know).
	Lock LockInfo
}

// Held reports whether the lock is held after the change.
func (c Change) Held() bool { return c.Event == "acquired" || c.Event == "extended" }

// Watch streams the changes of key until ctx ends, then closes the
// channel. The first change is the current state: acquired when the lock
// is held, released when it is free. A broken stream is reopened (after
// up to 5 s, with Last-Event-ID), and the gateway then sends what takes
// the watcher from the last change it saw to the present: intermediate
// states may be skipped, never reordered. Watch returns an error only
// when the first request fails (ErrUnavailable, or an *Error such as 401).
//
// Read the channel promptly: a reader that stalls holds up the stream
// and, after about 30 s, the gateway drops it and Watch reconnects.
// An http.Client given with WithHTTPClient must have no Timeout, or
// every stream ends after it (and is reopened).
func (c *Client) Watch(ctx context.Context, key string) (<-chan Change, error) {
	body, err := c.openStream(ctx, key, "")
	if err != nil {
		return nil, err
	}
	out := make(chan Change, 16)
	go func() {
		defer close(out)
		last := ""
		backoff := 100 * time.Millisecond
		for {
			if body != nil {
				var got bool
				last, got = readChanges(ctx, body, key, last, out)
				body.Close()
				if got {
					backoff = 100 * time.Millisecond
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			body, _ = c.openStream(ctx, key, last) // nil: try again later
		}
	}()
	return out, nil
}

// openStream sends the streaming GET.
func (c *Client) openStream(ctx context.Context, key, lastID string) (io.ReadCloser, error) {
	accept := "text/event-stream"
	params := &InspectLockParams{Accept: &accept}
	if lastID != "" {
		params.LastEventID = &lastID
	}
	resp, err := c.api.ClientInterface.InspectLock(ctx, key, params)
	if err != nil {
		return nil, transportError(ctx, "watch", key, err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, responseError(resp, b)
	}
	return resp.Body, nil
}

// readChanges sends the events of one stream to out until it ends, and
// returns the last id seen and whether any event came.
func readChanges(ctx context.Context, body io.Reader, key, last string, out chan<- Change) (string, bool) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 4096), 64<<10)
	var ch Change
	var data string
	got := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ch.Event == "" {
				continue
			}
			ch.Lock = parseLockData(key, data)
			select {
			case out <- ch:
			case <-ctx.Done():
				return last, got
			}
			if ch.ID != "" {
				last = ch.ID
			}
			got = true
			ch, data = Change{}, ""
		case strings.HasPrefix(line, ":"): // a heartbeat
		case strings.HasPrefix(line, "event:"):
			ch.Event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "id:"):
			ch.ID = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
		case strings.HasPrefix(line, "data:"):
			data += strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		}
	}
	return last, got
}

func parseLockData(key, data string) LockInfo {
	var b struct {
		Key       string    `json:"key"`
		Owner     string    `json:"owner"`
		Fence     int64     `json:"fence"`
		TTLms     int64     `json:"ttl_ms"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal([]byte(data), &b); err != nil || b.Key == "" {
		b.Key = key
	}
	return LockInfo{Key: b.Key, Owner: b.Owner, Fence: b.Fence, TTL: time.Duration(b.TTLms) * time.Millisecond, ExpiresAt: b.ExpiresAt}
}

// String is the change as one line, as lockctl watch prints it.
func (c Change) String() string {
	if c.Held() {
		return fmt.Sprintf("%s %s fence=%d owner=%q ttl=%v expires_at=%s", c.Event, c.Lock.Key, c.Lock.Fence, c.Lock.Owner,
			c.Lock.TTL, c.Lock.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	if c.Lock.Fence == 0 {
		return fmt.Sprintf("%s %s", c.Event, c.Lock.Key)
	}
	return fmt.Sprintf("%s %s fence=%d owner=%q", c.Event, c.Lock.Key, c.Lock.Fence, c.Lock.Owner)
}
