package client_test

import (
	"context"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/client"
	"github.com/lockgateway/lockgateway/internal/apitest"
)

// TestWatch: Watch reports the current state, then each change in order;
// when the connection breaks it reconnects with Last-Event-ID and gets
// the change it missed (here a release), not the ones it saw again.
func TestWatch(t *testing.T) {
	g := memoryGateway(t)
	target, err := url.Parse(g.URL)
	require.NoError(t, err)
	// A proxy whose connections the test can cut.
	proxy := httptest.NewServer(httputil.NewSingleHostReverseProxy(target))
	defer proxy.Close()
	c := newClient(t, proxy.URL)
	w := newClient(t, g.URL) // writes go round the proxy
	key := apitest.Key(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	changes, err := c.Watch(ctx, key)
	require.NoError(t, err)
	next := func(event string) client.Change {
		t.Helper()
		select {
		case ch, ok := <-changes:
			require.True(t, ok)
			require.Equal(t, event, ch.Event, "%v", ch)
			return ch
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s", event)
			return client.Change{}
		}
	}
	first := next("released")
	assert.False(t, first.Held())
	assert.Equal(t, key, first.Lock.Key)

	lease, err := w.Acquire(ctx, key, client.AcquireOptions{TTL: time.Minute, Owner: "w1"})
	require.NoError(t, err)
	acq := next("acquired")
	assert.True(t, acq.Held())
	assert.Equal(t, lease.Fence, acq.Lock.Fence)
	assert.Equal(t, "w1", acq.Lock.Owner)
	_, err = w.Extend(ctx, key, lease.Token, 2*time.Minute)
	require.NoError(t, err)
	ext := next("extended")
	assert.Greater(t, ext.Lock.TTL, time.Minute)

	// Cut the stream, release while it is down: the reconnect brings the
	// release, with the id a release of this grant has.
	proxy.CloseClientConnections()
	require.NoError(t, w.Release(ctx, key, lease.Token))
	rel := next("released")
	assert.Equal(t, lease.Fence, rel.Lock.Fence)
	assert.Equal(t, strconv.FormatInt(lease.Fence*1000+999, 10), rel.ID)

	lease2, err := w.Acquire(ctx, key, client.AcquireOptions{TTL: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, lease2.Fence, next("acquired").Lock.Fence)

	cancel()
	for range changes { // closed once ctx ends
	}
}

// TestWatchRefused: a watch the gateway refuses fails at once.
func TestWatchRefused(t *testing.T) {
	c := newClient(t, memoryGateway(t).URL)
	_, err := c.Watch(context.Background(), "bad//key")
	var e *client.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, 400, e.Status)
}
