package server_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
)

// TestWhoami: GET /whoami tells each known key its own user, prefixes and
// admin prefixes, in the keys file's terms (["*"] alone: every key; []: no
// admin role), and nothing else: no key, no digest, no other user. No key
// or an unknown one is 401, as for /locks.
func TestWhoami(t *testing.T) {
	body := `{"users":[
		{"user":"root","key_sha256":"` + digestHex("root-key-7f3a") + `","prefixes":["*"],"admin_prefixes":["*"]},
		{"user":"ops","key_sha256":"` + digestHex("ops-key-91c2") + `","prefixes":["*"],"admin_prefixes":["jobs/","cart/"]},
		{"user":"dev","key_sha256":"` + digestHex("dev-key-0b5e") + `","prefixes":["jobs/","cart/"]},
		{"user":"cron","key_sha256":"` + digestHex("cron-key-44d1") + `","prefixes":["jobs/"],"admin_prefixes":["jobs/nightly"]}]}`
	file := filepath.Join(t.TempDir(), "api-keys.json")
	require.NoError(t, os.WriteFile(file, []byte(body), 0o600))
	g := apitest.Start(t, map[string]string{"LOCKGW_API_KEYS_FILE": file})
	c := apitest.NewClient(g.URL)

	r := c.Do(t, "GET", "/whoami", nil)
	require.Equal(t, http.StatusUnauthorized, r.Status)
	assert.Equal(t, "unauthorized", r.ProblemType(t))
	assert.Equal(t, `Bearer realm="lockgateway"`, r.Header.Get("WWW-Authenticate"))
	assert.Equal(t, "no-store", r.Header.Get("Cache-Control"))
	r = c.Do(t, "GET", "/whoami", nil, "Authorization", "Bearer not-a-key")
	require.Equal(t, http.StatusUnauthorized, r.Status)
	assert.Contains(t, r.Header.Get("WWW-Authenticate"), `error="invalid_token"`)

	keys := map[string]string{"root": "root-key-7f3a", "ops": "ops-key-91c2", "dev": "dev-key-0b5e", "cron": "cron-key-44d1"}
	for user, want := range map[string]string{
		"root": `{"user":"root","prefixes":["*"],"admin_prefixes":["*"]}`,
		"ops":  `{"user":"ops","prefixes":["*"],"admin_prefixes":["jobs/","cart/"]}`,
		"dev":  `{"user":"dev","prefixes":["jobs/","cart/"],"admin_prefixes":[]}`,
		"cron": `{"user":"cron","prefixes":["jobs/"],"admin_prefixes":["jobs/nightly"]}`,
	} {
		r := c.Do(t, "GET", "/whoami", nil, "Authorization", "Bearer "+keys[user])
		require.Equal(t, http.StatusOK, r.Status, user)
		assert.JSONEq(t, want, string(r.Body), user)
		assert.Equal(t, "no-store", r.Header.Get("Cache-Control"), user)
		// Its own key and digest, and every other user's name, key and
		// digest, are nowhere in the answer, headers included.
		seen := string(r.Body)
		for name, v := range r.Header {
			seen += name + ": " + v[0] + "\n"
		}
		for other, key := range keys {
			assert.NotContains(t, seen, key, user)
			assert.NotContains(t, seen, digestHex(key), user)
			if other != user {
				assert.NotContains(t, seen, `"`+other+`"`, user)
			}
		}
	}

	// What it says is what the gateway does: dev's forced release is
	// refused, cron's inside its admin prefix goes through, outside is not.
	dev, cron := []string{"Authorization", "Bearer dev-key-0b5e"}, []string{"Authorization", "Bearer cron-key-44d1"}
	require.Equal(t, http.StatusCreated, c.Do(t, "PUT", "/locks/jobs/nightly-report", nil, dev...).Status)
	require.Equal(t, http.StatusCreated, c.Do(t, "PUT", "/locks/jobs/weekly", nil, dev...).Status)
	assert.Equal(t, http.StatusForbidden, c.Do(t, "DELETE", "/locks/jobs/nightly-report?force=true", nil, dev...).Status)
	assert.Equal(t, http.StatusForbidden, c.Do(t, "DELETE", "/locks/jobs/weekly?force=true", nil, cron...).Status)
	assert.Equal(t, http.StatusNoContent, c.Do(t, "DELETE", "/locks/jobs/nightly-report?force=true", nil, cron...).Status)
}

// TestWhoamiWithoutAPIKeys: with API keys off there is no user: anyone may
// lock every key and nobody administers any (a forced release is refused
// to everyone), whatever Authorization says.
func TestWhoamiWithoutAPIKeys(t *testing.T) {
	g := apitest.Start(t, nil)
	c := apitest.NewClient(g.URL)
	for _, auth := range [][]string{nil, {"Authorization", "Bearer some-key"}} {
		r := c.Do(t, "GET", "/whoami", nil, auth...)
		require.Equal(t, http.StatusOK, r.Status)
		assert.JSONEq(t, `{"prefixes":["*"],"admin_prefixes":[]}`, string(r.Body))
		assert.Equal(t, "no-store", r.Header.Get("Cache-Control"))
		assert.NotContains(t, string(r.Body), "some-key")
	}
	require.Equal(t, http.StatusCreated, c.Do(t, "PUT", "/locks/jobs/x", nil).Status)
	assert.Equal(t, http.StatusForbidden, c.Do(t, "DELETE", "/locks/jobs/x?force=true", nil, "Authorization", "Bearer some-key").Status)
}
