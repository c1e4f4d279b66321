package apitest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Event is one Server-Sent Event of a stream.
type Event struct {
	Name string
	ID   string // "" when the event carried none
	Data map[string]any
	At   time.Time // when it arrived
}

// Events is an open stream (Client.Stream).
type Events struct {
	C      <-chan Event // closed when the stream ends
	cancel context.CancelFunc
}

// Close ends the stream.
func (e *Events) Close() { e.cancel() }

// Stream sends GET path with Accept: text/event-stream. A 200 is checked
// against openapi.yaml (status and headers; the body is a stream) and its
// events are delivered on Events.C, each event's data checked against the
// schema its name has (LockInfo, LockEnded; SemaphoreEvent on /semaphores).
// Any other status is returned as a Response, checked like Do's, with nil
// Events.
func (c *Client) Stream(t testing.TB, path string, headers ...string) (*Events, *Response) {
	t.Helper()
	return c.openEvents(t, http.MethodGet, path, nil, headers, func(name string) (string, bool) {
		switch {
		case strings.HasPrefix(path, "/semaphores/"):
			return "SemaphoreEvent", true
		case name == "released" || name == "expired":
			return "LockEnded", true
		}
		return "LockInfo", true
	})
}

// Hold sends PUT path with Accept: text/event-stream and body: a hold. A
// 200 or 201 is checked against openapi.yaml (status and headers) and its
// events are delivered on Events.C, each event's data checked against the
// schema the spec's x-event-data names for it; any other status is
// returned as a Response, checked like Do's, with nil Events.
func (c *Client) Hold(t testing.TB, path string, body []byte, headers ...string) (*Events, *Response) {
	t.Helper()
	schemas := map[string]string{"acquired": "Lease", "renewed": "HoldRenewed", "released": "HoldEnd", "ended": "HoldEnd", "lost": "HoldEnd"}
	if strings.HasPrefix(path, "/semaphores/") {
		schemas["acquired"] = "Permit" // a hold of a permit
	}
	headers = append([]string{"Content-Type", "application/json"}, headers...)
	return c.openEvents(t, http.MethodPut, path, body, headers, func(name string) (string, bool) {
		schema, ok := schemas[name]
		return schema, ok
	})
}

// openEvents sends method path with Accept: text/event-stream. A 2xx is
// checked against openapi.yaml (status and headers; the body is a
// stream), and its events are read as readEvents does; any other status
// is returned as a Response, checked like Do's, with nil Events.
func (c *Client) openEvents(t testing.TB, method, path string, body []byte, headers []string,
	schemaOf func(name string) (string, bool)) (*Events, *Response) {
	t.Helper()
	// The spec is loaded (once per process) before the request goes out:
	// loaded at the first check of the answer, its parsing kept the
	// stream's first events unread, and their arrival times late, by
	// seconds on a loaded machine under -race (an nginx hold test saw its
	// acquired event 3 s after the grant in a loaded CI series; 26 ms on a
	// quiet one).
	Spec(t)
	ctx, cancel := context.WithCancel(context.Background())
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	client := *c.HTTP
	client.Timeout = 0 // a stream lasts
	hresp, err := client.Do(req)
	require.NoError(t, err)
	if hresp.StatusCode/100 != 2 {
		defer cancel()
		defer hresp.Body.Close()
		b, err := io.ReadAll(hresp.Body)
		require.NoError(t, err)
		resp := &Response{Status: hresp.StatusCode, Header: hresp.Header, Body: b}
		CheckResponse(t, req, resp)
		return nil, resp
	}
	CheckResponse(t, req, &Response{Status: hresp.StatusCode, Header: hresp.Header})
	require.Equal(t, "text/event-stream", hresp.Header.Get("Content-Type"))
	return &Events{C: readEvents(t, hresp.Body, schemaOf), cancel: cancel}, nil
}

// readEvents delivers the Server-Sent Events of body on the returned
// channel, closed when the stream ends, each event's data checked against
// the openapi.yaml schema schemaOf names for it (ok false: an event the
// stream must not send).
func readEvents(t testing.TB, body io.ReadCloser, schemaOf func(name string) (schema string, ok bool)) <-chan Event {
	doc, _ := Spec(t)
	ch := make(chan Event, 64)
	go func() {
		defer close(ch)
		defer body.Close()
		sc := bufio.NewScanner(body)
		var ev Event
		var data string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.Name == "" {
					continue // a comment's blank line
				}
				ev.At = time.Now()
				var v any
				if err := json.Unmarshal([]byte(data), &v); err != nil {
					t.Errorf("event %s: data %q is not JSON: %v", ev.Name, data, err)
				}
				_ = json.Unmarshal([]byte(data), &ev.Data)
				if schema, ok := schemaOf(ev.Name); !ok {
					t.Errorf("stream: unexpected event %q", ev.Name)
				} else if err := doc.Components.Schemas[schema].Value.VisitJSON(v); err != nil {
					t.Errorf("event %s: data %s does not match %s: %v", ev.Name, data, schema, err)
				}
				ch <- ev
				ev, data = Event{}, ""
			case strings.HasPrefix(line, ":"):
			case strings.HasPrefix(line, "event: "):
				ev.Name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				ev.ID = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				data = strings.TrimPrefix(line, "data: ")
			default:
				t.Errorf("stream: unexpected line %q", line)
			}
		}
	}()
	return ch
}
