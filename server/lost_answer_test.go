package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
)

// TestTokenlessWaiterLostAnswerIsANewGrant: a waiting PUT without
// Lock-Token whose own try was granted but answered past the backend
// timeout tries again with the same token, and Redis says the token
// already holds the key. That token is the gateway's, made for this one
// request, so this is the request's own new grant: 201 with its Location
// (and released should the client leave), not 200 "already held" (found
// by review).
func TestTokenlessWaiterLostAnswerIsANewGrant(t *testing.T) {
	srv := redistest.Start(t)
	p := redistest.NewProxy(t, srv.Addr(), 0)
	g0 := apitest.Start(t, map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_URL": srv.URL()})
	g1 := apitest.Start(t, map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_URL": p.URL(), "LOCKGW_BACKEND_TIMEOUT": "300ms"})
	c0, c1 := apitest.NewClient(g0.URL), apitest.NewClient(g1.URL)
	key := apitest.Key(t)
	path := lockPath(key)
	rc := srv.Client()
	ctx := context.Background()

	holder := "lost-answer-holder-0123456789abcdef"
	require.Equal(t, http.StatusCreated, c0.Do(t, "PUT", path, []byte(`{"ttl_ms":60000}`), "Lock-Token", holder, "Content-Type", "application/json").Status)
	got := make(chan *apitest.Response, 1)
	go func() {
		got <- c1.Do(t, "PUT", path, []byte(`{"ttl_ms":60000,"wait_ms":10000}`), "Content-Type", "application/json")
	}()
	require.Eventually(t, func() bool { return rc.ZCard(ctx, "lockgw:{"+key+"}:queue").Val() == 1 },
		5*time.Second, time.Millisecond, "the waiter queued")
	time.Sleep(200 * time.Millisecond) // it rests

	p.SetReplyDelay(700 * time.Millisecond) // past g1's backend timeout
	require.Equal(t, http.StatusNoContent, c0.Do(t, "DELETE", path, nil, "Lock-Token", holder).Status)
	require.Eventually(t, func() bool { return rc.Exists(ctx, "lockgw:{"+key+"}:lock").Val() == 1 },
		5*time.Second, time.Millisecond, "the waiter's try granted it; its answer is late")
	time.Sleep(50 * time.Millisecond)
	p.SetReplyDelay(0)

	r := <-got
	t.Logf("PUT without Lock-Token: %d %s (Location %q)", r.Status, r.Body, r.Header.Get("Location"))
	assert.Equal(t, http.StatusCreated, r.Status, "the request's own grant, of a token it alone knows")
	assert.NotEmpty(t, r.Header.Get("Location"))
}
