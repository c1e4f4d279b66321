//go:build unix

package nginx_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
)

// TestNginxPassesHoldStreams runs a hold (a PUT with Accept:
// text/event-stream) through the recipe's nginx: the acquired event
// arrives at once and each renewed as the gateway makes it, not when a
// buffer fills; a client that goes away through nginx frees the key at
// once. The control, the same nginx with its buffering on (and the
// gateway's X-Accel-Buffering: no ignored), holds the events back, which
// this test sees.
func TestNginxPassesHoldStreams(t *testing.T) {
	bin := nginxBinary(t)
	g := apitest.Start(t, map[string]string{"LOCKGW_TRUSTED_PROXIES": "127.0.0.1/32"})
	gateway := strings.TrimPrefix(g.URL, "http://")
	base := startNginx(t, bin, gateway)
	c := apitest.NewClient(base)
	direct := apitest.NewClient(g.URL)
	// An event is of use to the holder only if it arrives within the lease
	// it announces: "at once" is within a TTL. Buffered, the events of a
	// 3 s hold (about 150 bytes each, three a TTL) would come out when
	// nginx's 4 KiB buffer fills, about nine TTLs late. (A 600 ms hold with
	// a 1 s bound failed on a loaded machine, the acquired event 1.7 s
	// after its PUT: a bound in seconds, not the hold's own time.)
	const ttl = 3 * time.Second
	const atOnce = ttl

	t.Run("events as they happen", func(t *testing.T) {
		sent := time.Now()
		events, resp := c.Hold(t, "/locks/"+apitest.Key(t), fmt.Appendf(nil, `{"ttl_ms":%d}`, ttl.Milliseconds()))
		require.Nil(t, resp, "a hold through nginx")
		defer events.Close()
		acq := nextEvent(t, events)
		require.Equal(t, "acquired", acq.Name)
		// Judged from the grant (its expires_at less the TTL, by this
		// host's clock, the memory backend's), not from the send: a loaded
		// machine queued a PUT 3 s before the gateway took it up.
		granted, err := time.Parse(time.RFC3339Nano, acq.Data["expires_at"].(string))
		require.NoError(t, err)
		t.Logf("acquired %v after the PUT was sent, %v after the grant", acq.At.Sub(sent), acq.At.Sub(granted.Add(-ttl)))
		assert.Less(t, acq.At.Sub(granted.Add(-ttl)), atOnce, "acquired at once")

		// A renewal is made at its expires_at less the TTL (the memory
		// backend's clock is this host's): its event must follow it closely.
		var worst time.Duration
		for range 5 {
			e := nextEvent(t, events)
			require.Equal(t, "renewed", e.Name)
			expires, err := time.Parse(time.RFC3339Nano, e.Data["expires_at"].(string))
			require.NoError(t, err)
			lag := e.At.Sub(expires.Add(-ttl))
			worst = max(worst, lag)
			assert.Less(t, lag, atOnce, "a renewal reaches the client as it happens")
		}
		t.Logf("renewed events arrived at most %v after their renewals", worst)
	})

	t.Run("a client gone through nginx frees the key", func(t *testing.T) {
		key := apitest.Key(t)
		// A long lease: freed in less than its TTL means released, not
		// expired.
		events, resp := c.Hold(t, "/locks/"+key, []byte(`{"ttl_ms":30000}`))
		require.Nil(t, resp)
		require.Equal(t, "acquired", nextEvent(t, events).Name)
		require.Equal(t, http.StatusOK, direct.Do(t, "GET", "/locks/"+key, nil).Status, "held")
		closed := time.Now()
		events.Close()
		require.Eventually(t, func() bool { return direct.Do(t, "GET", "/locks/"+key, nil).Status == http.StatusNotFound },
			10*time.Second, 10*time.Millisecond, "free once the client went away")
		t.Logf("free %v after the client closed its stream to nginx", time.Since(closed))
		// Well below the TTL tells a release from an expiry, however
		// loaded the machine.
		assert.Less(t, time.Since(closed), 10*time.Second, "released at once, not at its 30 s TTL")
	})

	// The controls: what the recipe's lines keep away, seen by the checks
	// above. nginx 1.22 passes each event on at once even buffering, as
	// long as it talks HTTP/1.1 to the gateway; with its default HTTP/1.0
	// and buffering on, they come out when its buffer fills (about 3 s of
	// this hold's events), which the recipe's proxy_buffering off prevents
	// even for an nginx that ignores the gateway's X-Accel-Buffering: no.
	t.Run("control: buffered, the events come late", func(t *testing.T) {
		buffered := startNginxEdited(t, bin, gateway, func(conf string) string {
			for _, line := range []string{"proxy_buffering off;", "proxy_http_version 1.1;"} {
				require.Contains(t, conf, line)
				conf = strings.Replace(conf, line, "", 1)
			}
			return strings.Replace(conf, "proxy_pass http://lockgateway;\n", "proxy_pass http://lockgateway;\nproxy_ignore_headers X-Accel-Buffering;\n", 1)
		})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel() // ends the hold
		acquired := make(chan time.Duration, 1)
		sent := time.Now()
		go func() {
			req, err := http.NewRequestWithContext(ctx, "PUT", buffered+"/locks/"+apitest.Key(t),
				strings.NewReader(fmt.Sprintf(`{"ttl_ms":%d}`, ttl.Milliseconds())))
			if err != nil {
				return
			}
			req.Header.Set("Accept", "text/event-stream")
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
				if sc.Text() == "event: acquired" {
					acquired <- time.Since(sent)
					return
				}
			}
		}()
		select {
		case took := <-acquired:
			t.Errorf("the acquired event came through a buffering nginx after %v: the check above would not see buffering", took)
		case <-time.After(atOnce + 500*time.Millisecond): // a bounded wait: what is checked is that nothing comes
		}
	})

	t.Run("control: proxy_ignore_client_abort on keeps the key", func(t *testing.T) {
		ignoring := startNginxEdited(t, bin, gateway, func(conf string) string {
			require.Contains(t, conf, "proxy_buffering off;")
			return strings.Replace(conf, "proxy_buffering off;", "proxy_buffering off; proxy_ignore_client_abort on;", 1)
		})
		key := apitest.Key(t)
		events, resp := apitest.NewClient(ignoring).Hold(t, "/locks/"+key, []byte(`{"ttl_ms":30000}`))
		require.Nil(t, resp)
		require.Equal(t, "acquired", nextEvent(t, events).Name)
		events.Close()
		assert.Never(t, func() bool { return direct.Do(t, "GET", "/locks/"+key, nil).Status == http.StatusNotFound },
			2*time.Second, 50*time.Millisecond, "nginx kept the hold's request going: the check above would see a key kept")
	})
}

// nextEvent waits for the stream's next event.
func nextEvent(t *testing.T, events *apitest.Events) apitest.Event {
	t.Helper()
	select {
	case e, ok := <-events.C:
		require.True(t, ok, "the stream ended")
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
		return apitest.Event{}
	}
}
