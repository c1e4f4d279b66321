package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
)

type listedLock struct {
	Key     string `json:"key"`
	Owner   string `json:"owner"`
	Fence   int64  `json:"fence"`
	TTLms   int64  `json:"ttl_ms"`
	Waiters int    `json:"waiters"`
}

type lockPage struct {
	Items []listedLock `json:"items"`
	Next  *string      `json:"next"`
}

func listPage(t *testing.T, c *apitest.Client, query string, headers ...string) (*apitest.Response, lockPage) {
	t.Helper()
	r := c.Do(t, "GET", "/locks?"+query, nil, headers...)
	var p lockPage
	if r.Status == http.StatusOK {
		require.NoError(t, json.Unmarshal(r.Body, &p))
	}
	return r, p
}

// TestListLocks: GET /locks pages through a prefix in key order, each lock
// once, with owner and fence and never a token; next is absent on the last
// page; every response matches openapi.yaml (apitest checks each).
func TestListLocks(t *testing.T) {
	g := apitest.Start(t, map[string]string{})
	c := apitest.NewClient(g.URL)
	base := apitest.Key(t)
	var want []string
	fences := map[string]int64{}
	var tokens []string
	for i := range 25 {
		key := fmt.Sprintf("%s/k%02d", base, 24-i) // taken in reverse order
		r := c.Do(t, "PUT", "/locks/"+key, []byte(`{"ttl_ms":60000,"owner":"w"}`), "Content-Type", "application/json")
		require.Equal(t, http.StatusCreated, r.Status)
		body := r.JSON(t)
		fences[key] = int64(body["fence"].(float64))
		tokens = append(tokens, body["token"].(string))
		want = append([]string{key}, want...)
	}
	c.Do(t, "PUT", "/locks/"+base+"x", nil) // outside the prefix base+"/"

	var got []string
	query := "prefix=" + url.QueryEscape(base+"/") + "&limit=10"
	for pages := 1; ; pages++ {
		r, p := listPage(t, c, query)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		assert.Equal(t, "no-store", r.Header.Get("Cache-Control"))
		for _, tok := range tokens {
			require.NotContains(t, string(r.Body), tok, "a listing never shows a token")
		}
		for _, it := range p.Items {
			got = append(got, it.Key)
			assert.Equal(t, fences[it.Key], it.Fence)
			assert.Equal(t, "w", it.Owner)
			assert.Positive(t, it.TTLms)
		}
		if p.Next == nil {
			assert.Equal(t, 3, pages)
			break
		}
		assert.Len(t, p.Items, 10)
		query = "prefix=" + url.QueryEscape(base+"/") + "&limit=10&cursor=" + url.QueryEscape(*p.Next)
	}
	assert.Equal(t, want, got)

	// The default limit, and an empty prefix, which lists everything.
	r, p := listPage(t, c, "")
	require.Equal(t, http.StatusOK, r.Status)
	assert.Len(t, p.Items, 26)
	assert.Nil(t, p.Next)
}

// TestListLocksBadQueries: each malformed listing is a 400 problem, an
// out-of-range limit a 422 naming it; none lists anything.
func TestListLocksBadQueries(t *testing.T) {
	g := apitest.Start(t, map[string]string{})
	c := apitest.NewClient(g.URL)
	c.Do(t, "PUT", "/locks/a/one", nil)
	c.Do(t, "PUT", "/locks/b/one", nil)
	_, first := listPage(t, c, "prefix=a/&limit=1")
	_, all := listPage(t, c, "limit=1")
	require.NotNil(t, all.Next)
	for query, status := range map[string]int{
		"limit=abc":                          http.StatusBadRequest,
		"limit=0":                            http.StatusUnprocessableEntity,
		"limit=1001":                         http.StatusUnprocessableEntity,
		"limit=1&limit=2":                    http.StatusBadRequest,
		"prefx=a/":                           http.StatusBadRequest,
		"prefix=/a":                          http.StatusBadRequest,
		"prefix=a*":                          http.StatusBadRequest,
		"prefix=a//":                         http.StatusBadRequest,
		"prefix=" + strings.Repeat("a", 300): http.StatusBadRequest,
		"cursor=%%%":                         http.StatusBadRequest,
		"cursor=not-base64!":                 http.StatusBadRequest,
		"prefix=b/&cursor=" + url.QueryEscape(*all.Next): http.StatusBadRequest, // a's cursor under b/
		"prefix=a/&cursor=" + url.QueryEscape(*all.Next): http.StatusOK,
	} {
		r := c.Do(t, "GET", "/locks?"+query, nil)
		assert.Equal(t, status, r.Status, "%s: %s", query, r.Body)
		if status == http.StatusUnprocessableEntity {
			assert.Contains(t, string(r.Body), `"field":"limit"`)
		}
	}
	assert.Nil(t, first.Next)
}

// TestListLocksUnderAPIKeys: a user lists only inside its prefixes (403
// for any other, the empty prefix included); without a key, 401.
func TestListLocksUnderAPIKeys(t *testing.T) {
	g := apitest.Start(t, map[string]string{"LOCKGW_API_KEYS_FILE": keysFile(t, `["teamA/"]`)})
	c := apitest.NewClient(g.URL)
	for _, k := range []string{"teamA/job", "teamA/sub/job", "teamB/job"} {
		key := "a-key"
		if strings.HasPrefix(k, "teamB") {
			key = "ops-key"
		}
		require.Equal(t, http.StatusCreated, c.Do(t, "PUT", "/locks/"+k, nil, "Authorization", "Bearer "+key).Status)
	}
	for _, tc := range []struct {
		key, prefix string
		status      int
		keys        []string
	}{
		{"a-key", "teamA/", http.StatusOK, []string{"teamA/job", "teamA/sub/job"}},
		{"a-key", "teamA/sub/", http.StatusOK, []string{"teamA/sub/job"}},
		{"a-key", "", http.StatusForbidden, nil},
		{"a-key", "team", http.StatusForbidden, nil},
		{"a-key", "teamB/", http.StatusForbidden, nil},
		{"ops-key", "", http.StatusOK, []string{"teamA/job", "teamA/sub/job", "teamB/job"}},
		{"", "teamA/", http.StatusUnauthorized, nil},
	} {
		var headers []string
		if tc.key != "" {
			headers = []string{"Authorization", "Bearer " + tc.key}
		}
		r, p := listPage(t, c, "prefix="+url.QueryEscape(tc.prefix), headers...)
		if !assert.Equal(t, tc.status, r.Status, "%s listing %q: %s", tc.key, tc.prefix, r.Body) || tc.status != http.StatusOK {
			continue
		}
		var keys []string
		for _, it := range p.Items {
			keys = append(keys, it.Key)
		}
		assert.Equal(t, tc.keys, keys, "%s listing %q", tc.key, tc.prefix)
	}
}

// TestListSemaphores: GET /semaphores lists the semaphores with permits
// held under a prefix, each with its limit and holders (never a token) and
// its waiters, under the same rules as GET /locks.
func TestListSemaphores(t *testing.T) {
	g := apitest.Start(t, map[string]string{"LOCKGW_API_KEYS_FILE": keysFile(t, `["teamA/"]`)})
	c := apitest.NewClient(g.URL)
	auth := []string{"Authorization", "Bearer a-key", "Content-Type", "application/json"}
	var tokens []string
	for _, p := range []struct {
		key   string
		limit int
	}{{"teamA/export", 2}, {"teamA/export", 2}, {"teamA/import", 1}} {
		r := c.Do(t, "PUT", "/semaphores/"+p.key, []byte(fmt.Sprintf(`{"limit":%d,"owner":"w"}`, p.limit)), auth...)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		tokens = append(tokens, r.JSON(t)["token"].(string))
	}
	r := c.Do(t, "GET", "/semaphores?prefix=teamA/&limit=1", nil, auth...)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	for _, tok := range tokens {
		assert.NotContains(t, string(r.Body), tok, "never a token")
	}
	var p struct {
		Items []struct {
			Key     string `json:"key"`
			Limit   int    `json:"limit"`
			Held    int    `json:"held"`
			Holders []struct {
				Owner string `json:"owner"`
				Fence int64  `json:"fence"`
			} `json:"holders"`
			Waiters int `json:"waiters"`
		} `json:"items"`
		Next string `json:"next"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &p))
	require.Len(t, p.Items, 1)
	assert.Equal(t, "teamA/export", p.Items[0].Key)
	assert.Equal(t, 2, p.Items[0].Limit)
	assert.Equal(t, 2, p.Items[0].Held)
	assert.Len(t, p.Items[0].Holders, 2)
	require.NotEmpty(t, p.Next)
	r = c.Do(t, "GET", "/semaphores?prefix=teamA/&limit=1&cursor="+url.QueryEscape(p.Next), nil, auth...)
	require.Equal(t, http.StatusOK, r.Status)
	p.Next = ""
	require.NoError(t, json.Unmarshal(r.Body, &p))
	require.Len(t, p.Items, 1)
	assert.Equal(t, "teamA/import", p.Items[0].Key)
	assert.Empty(t, p.Next)

	assert.Equal(t, http.StatusForbidden, c.Do(t, "GET", "/semaphores?prefix=teamB/", nil, auth...).Status)
	assert.Equal(t, http.StatusBadRequest, c.Do(t, "GET", "/semaphores?prefix=teamA/&cursor=x", nil, auth...).Status)
}

// TestListMarksHolds: on every backend, the listings mark the leases a
// hold's stream on this gateway keeps (held_by_stream): a held lock and a
// held permit, not a lock or a permit taken by a plain PUT; and the mark
// goes with the stream. Every response matches openapi.yaml.
func TestListMarksHolds(t *testing.T) {
	backends(t, func(t *testing.T, g *apitest.Gateway) {
		c := apitest.NewClient(g.URL)
		base := apitest.Key(t)
		held, resp := c.Hold(t, "/locks/"+base+"/held", []byte(`{"ttl_ms":3000}`))
		require.Nil(t, resp)
		defer held.Close()
		e, _ := nextEvent(t, held, 2*time.Second)
		require.Equal(t, "acquired", e.Name)
		require.Equal(t, http.StatusCreated, c.Do(t, "PUT", "/locks/"+base+"/plain", []byte(`{"ttl_ms":60000}`), apitest.JSON...).Status)
		permit, resp := c.Hold(t, "/semaphores/"+base+"/pool", []byte(`{"limit":2,"ttl_ms":3000,"owner":"held"}`))
		require.Nil(t, resp)
		defer permit.Close()
		e, _ = nextEvent(t, permit, 2*time.Second)
		require.Equal(t, "acquired", e.Name)
		r := c.Do(t, "PUT", "/semaphores/"+base+"/pool", []byte(`{"limit":2,"ttl_ms":60000,"owner":"plain"}`), apitest.JSON...)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)

		locks := func() map[string]bool {
			r := c.Do(t, "GET", "/locks?prefix="+base+"/", nil)
			require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
			var p struct {
				Items []struct {
					Key          string `json:"key"`
					HeldByStream bool   `json:"held_by_stream"`
				} `json:"items"`
			}
			require.NoError(t, json.Unmarshal(r.Body, &p))
			out := map[string]bool{}
			for _, it := range p.Items {
				out[strings.TrimPrefix(it.Key, base+"/")] = it.HeldByStream
			}
			return out
		}
		assert.Equal(t, map[string]bool{"held": true, "plain": false}, locks())

		r = c.Do(t, "GET", "/semaphores?prefix="+base+"/", nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var sems struct {
			Items []struct {
				Holders []struct {
					Owner        string `json:"owner"`
					HeldByStream bool   `json:"held_by_stream"`
				} `json:"holders"`
			} `json:"items"`
		}
		require.NoError(t, json.Unmarshal(r.Body, &sems))
		require.Len(t, sems.Items, 1)
		byOwner := map[string]bool{}
		for _, h := range sems.Items[0].Holders {
			byOwner[h.Owner] = h.HeldByStream
		}
		assert.Equal(t, map[string]bool{"held": true, "plain": false}, byOwner)

		held.Close()
		require.Eventually(t, func() bool { _, ok := locks()["held"]; return !ok }, 2*time.Second, 10*time.Millisecond,
			"the held lock is released once its stream closes")
		assert.Equal(t, map[string]bool{"plain": false}, locks())
	})
}
