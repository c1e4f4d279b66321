package server_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
)

// adminKeysFile: ops may lock every key and administers jobs/; dev may
// lock jobs/ and cart/ and administers nothing.
func adminKeysFile(t *testing.T) string {
	t.Helper()
	body := `{"users":[
		{"user":"ops","key_sha256":"` + digestHex("ops-key") + `","prefixes":["*"],"admin_prefixes":["jobs/"]},
		{"user":"dev","key_sha256":"` + digestHex("dev-key") + `","prefixes":["jobs/","cart/"]}]}`
	path := filepath.Join(t.TempDir(), "api-keys.json")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

// backendsWith is backends with env added to each gateway's.
func backendsWith(t *testing.T, env map[string]string, fn func(t *testing.T, g *apitest.Gateway)) {
	with := func(base map[string]string) map[string]string {
		out := maps.Clone(env)
		maps.Copy(out, base)
		return out
	}
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		fn(t, apitest.Start(t, with(nil)))
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		fn(t, apitest.Start(t, with(map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_URL": srv.URL()})))
	})
	t.Run("redlock", func(t *testing.T) {
		t.Parallel()
		_, env := redlockEnv(t, 5)
		fn(t, apitest.Start(t, with(env)))
	})
}

func fenceOf(t *testing.T, r *apitest.Response) int64 {
	t.Helper()
	f, ok := r.JSON(t)["fence"].(float64)
	require.True(t, ok, "a fence in %s", r.Body)
	return int64(f)
}

// TestForcedRelease: an administrator of a key releases its lease
// without the token, on every backend; nobody else may.
func TestForcedRelease(t *testing.T) {
	backendsWith(t, map[string]string{"LOCKGW_API_KEYS_FILE": adminKeysFile(t)}, func(t *testing.T, g *apitest.Gateway) {
		c := apitest.NewClient(g.URL)
		ops, dev := []string{"Authorization", "Bearer ops-key"}, []string{"Authorization", "Bearer dev-key"}
		key := "jobs/" + apitest.Key(t)
		path := lockPath(key)

		grant := c.Do(t, "PUT", path, []byte(`{"ttl_ms":3600000,"owner":"crashed-7"}`), append(apitest.JSON, dev...)...)
		require.Equal(t, http.StatusCreated, grant.Status, string(grant.Body))
		token, fence := grant.JSON(t)["token"].(string), fenceOf(t, grant)

		r := c.Do(t, "DELETE", path+"?force=true", nil, dev...)
		require.Equal(t, http.StatusForbidden, r.Status, "dev administers nothing")
		assert.Equal(t, "forbidden", r.ProblemType(t))
		assert.Contains(t, r.Problem(t)["detail"], "admin_prefixes")

		r = c.Do(t, "DELETE", path+"?force=true", nil, append([]string{"Lock-Token", token}, ops...)...)
		require.Equal(t, http.StatusBadRequest, r.Status, "force with a token: one or the other")
		assert.Contains(t, r.Problem(t)["detail"], "one or the other")

		r = c.Do(t, "DELETE", path+"?force=true&fence="+strconv.FormatInt(fence+1, 10), nil, ops...)
		require.Equal(t, http.StatusNotFound, r.Status, "another fence: nothing released")
		require.Equal(t, http.StatusOK, c.Do(t, "GET", path, nil, dev...).Status, "still held")

		r = c.Do(t, "DELETE", path+"?force=true", nil, ops...)
		require.Equal(t, http.StatusNoContent, r.Status, string(r.Body))

		r = c.Do(t, "PATCH", path, nil, append([]string{"Lock-Token", token}, dev...)...)
		assert.Equal(t, http.StatusNotFound, r.Status, "the holder's extend finds nothing")
		r = c.Do(t, "DELETE", path, nil, append([]string{"Lock-Token", token}, dev...)...)
		assert.Equal(t, http.StatusNotFound, r.Status, "nor does its release")
		r = c.Do(t, "DELETE", path+"?force=true", nil, ops...)
		assert.Equal(t, http.StatusNotFound, r.Status, "a free key: nothing to release")

		next := c.Do(t, "PUT", path, nil, dev...)
		require.Equal(t, http.StatusCreated, next.Status)
		assert.Greater(t, fenceOf(t, next), fence, "the fence rises for the next holder")

		// The audit: a warning naming who, what and whose; the access
		// log's line of each forced DELETE says force. (Log lines reach
		// the output within a tenth of a second.)
		require.Eventually(t, func() bool { return strings.Contains(g.Logs.String(), `"forced release"`) }, 5*time.Second, 10*time.Millisecond)
		var audit map[string]any
		for line := range strings.SplitSeq(g.Logs.String(), "\n") {
			if strings.Contains(line, `"forced release"`) {
				require.Nil(t, audit, "one audit line: %s", line)
				require.NoError(t, json.Unmarshal([]byte(line), &audit))
			}
		}
		require.NotNil(t, audit, "the forced release is logged: %s", g.Logs.String())
		assert.Equal(t, "warn", audit["level"])
		assert.Equal(t, "ops", audit["user"])
		assert.Equal(t, key, audit["key"])
		assert.Equal(t, "lock", audit["kind"])
		assert.EqualValues(t, fence, audit["fence"])
		assert.Equal(t, "crashed-7", audit["owner"])
		assert.NotContains(t, g.Logs.String(), token, "the token never reaches the log")
		assert.Contains(t, g.Logs.String(), `"force":true,"method":"DELETE"`)

		m := c.Do(t, "GET", "/metrics", nil)
		assert.Contains(t, string(m.Body), `lockgw_forced_releases_total{kind="lock",user="ops"} 1`)
		assert.Contains(t, string(m.Body), `lockgw_forced_releases_total{kind="permit",user="ops"} 0`)
		assert.NotContains(t, string(m.Body), `user="dev"`, "only administrators are counted")
	})
}

// TestForcedReleasePermit: a permit is named by its fence.
func TestForcedReleasePermit(t *testing.T) {
	backendsWith(t, map[string]string{"LOCKGW_API_KEYS_FILE": adminKeysFile(t)}, func(t *testing.T, g *apitest.Gateway) {
		c := apitest.NewClient(g.URL)
		ops, dev := []string{"Authorization", "Bearer ops-key"}, []string{"Authorization", "Bearer dev-key"}
		path := "/semaphores/jobs/" + apitest.Key(t)
		take := func() (string, int64) {
			r := c.Do(t, "PUT", path, []byte(`{"limit":2,"ttl_ms":3600000,"owner":"exporter"}`), append(apitest.JSON, dev...)...)
			require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
			return r.JSON(t)["token"].(string), fenceOf(t, r)
		}
		ta, fa := take()
		_, fb := take()

		r := c.Do(t, "DELETE", path+"?force=true", nil, ops...)
		require.Equal(t, http.StatusBadRequest, r.Status, "no fence")
		assert.Contains(t, r.Problem(t)["detail"], "fence")
		r = c.Do(t, "DELETE", path+"?force=true&fence="+strconv.FormatInt(fa, 10), nil, dev...)
		require.Equal(t, http.StatusForbidden, r.Status)

		r = c.Do(t, "DELETE", path+"?force=true&fence="+strconv.FormatInt(fa, 10), nil, ops...)
		require.Equal(t, http.StatusNoContent, r.Status, string(r.Body))
		r = c.Do(t, "DELETE", path+"?force=true&fence="+strconv.FormatInt(fa, 10), nil, ops...)
		require.Equal(t, http.StatusNotFound, r.Status, "gone already")

		st := c.Do(t, "GET", path, nil, dev...)
		require.Equal(t, http.StatusOK, st.Status)
		holders := st.JSON(t)["holders"].([]any)
		require.Len(t, holders, 1)
		assert.EqualValues(t, fb, holders[0].(map[string]any)["fence"], "the other permit stays")
		r = c.Do(t, "PATCH", path, nil, append([]string{"Lock-Token", ta}, dev...)...)
		assert.Equal(t, http.StatusPreconditionFailed, r.Status, "a's permit is gone; b's is not a's")
		assert.Eventually(t, func() bool { return strings.Contains(g.Logs.String(), `"kind":"permit"`) }, 5*time.Second, 10*time.Millisecond)
	})
}

// TestForcedReleaseRequests: what a DELETE's force and fence may be, and
// that without API keys nobody may release by force.
func TestForcedReleaseRequests(t *testing.T) {
	g := apitest.Start(t, nil)
	c := apitest.NewClient(g.URL)
	path := lockPath(apitest.Key(t))
	grant := c.Do(t, "PUT", path, nil)
	require.Equal(t, http.StatusCreated, grant.Status)

	for _, q := range []string{"force=yes", "fence=7", "force=true&fence=abc", "force=true&fence=0", "force=true&force=true", "force=true&fence=9007199254740992", "force=%zz"} {
		r := c.Do(t, "DELETE", path+"?"+q, nil)
		assert.Equal(t, http.StatusBadRequest, r.Status, q)
		assert.Equal(t, "malformed-request", r.ProblemType(t), q)
	}
	r := c.Do(t, "DELETE", path+"?force=true", nil)
	require.Equal(t, http.StatusForbidden, r.Status)
	assert.Contains(t, r.Problem(t)["detail"], "no API keys")
	assert.True(t, held(t, c, path), "nothing was released")

	r = c.Do(t, "DELETE", path+"?force=false", nil, "Lock-Token", grant.JSON(t)["token"].(string))
	assert.Equal(t, http.StatusNoContent, r.Status, "force=false is an ordinary release")
}

// TestForcedReleaseEndsAHold: a forced release through the gateway that
// holds the stream ends it at once: lost, reason forced; not at the next
// renewal, and not as released.
func TestForcedReleaseEndsAHold(t *testing.T) {
	backendsWith(t, map[string]string{"LOCKGW_API_KEYS_FILE": adminKeysFile(t)}, func(t *testing.T, g *apitest.Gateway) {
		c := apitest.NewClient(g.URL)
		ops, dev := []string{"Authorization", "Bearer ops-key"}, []string{"Authorization", "Bearer dev-key"}
		for i, kind := range []string{"lock", "permit"} {
			t.Run(kind, func(t *testing.T) {
				path, body, force := lockPath("jobs/"+apitest.Key(t)), `{"ttl_ms":6000}`, "?force=true"
				if kind == "permit" {
					path, body = "/semaphores/jobs/"+apitest.Key(t), `{"limit":3,"ttl_ms":6000}`
				}
				events, resp := c.Hold(t, path, []byte(body), dev...)
				require.Nil(t, resp)
				defer events.Close()
				acq, _ := nextEvent(t, events, 2*time.Second)
				require.Equal(t, "acquired", acq.Name)
				fence := int64(acq.Data["fence"].(float64))
				if kind == "permit" {
					force += "&fence=" + strconv.FormatInt(fence, 10)
				}

				forced := time.Now()
				require.Equal(t, http.StatusNoContent, c.Do(t, "DELETE", path+force, nil, ops...).Status)
				e, ok := nextEvent(t, events, 5*time.Second)
				require.True(t, ok, "a final event before the stream closes")
				assert.Equal(t, "lost", e.Name, "the holder must stop")
				assert.Equal(t, "forced", e.Data["reason"])
				assert.EqualValues(t, fence, e.Data["fence"])
				assert.Less(t, time.Since(forced), time.Second, "at once, not at the next renewal (2 s)")
				_, ok = nextEvent(t, events, 2*time.Second)
				assert.False(t, ok, "closed after the final event")

				m := c.Do(t, "GET", "/metrics", nil)
				assert.Contains(t, string(m.Body), `lockgw_hold_ends_total{reason="forced"} `+strconv.Itoa(i+1))
			})
		}
	})
}
