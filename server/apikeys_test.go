package server_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/server"
)

// keysFile writes an API-keys file for users teamA (key "a-key", with the
// given prefixes JSON, "" for none) and ops (key "ops-key", every key).
func keysFile(t *testing.T, teamAPrefixes string) string {
	t.Helper()
	entry := `{"user":"teamA","key_sha256":"` + digestHex("a-key") + `"`
	if teamAPrefixes != "" {
		entry += `,"prefixes":` + teamAPrefixes
	}
	body := `{"users":[` + entry + `},{"user":"ops","key_sha256":"` + digestHex("ops-key") + `","prefixes":["*"]}]}`
	path := filepath.Join(t.TempDir(), "api-keys.json")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

// TestAPIKeyEntriesThatAllowEverythingStopStartup: a keys-file entry whose
// prefixes would let its user lock every key without saying so ("*") stops
// the gateway at start-up, naming the user. Before, "prefixes": [] or [""]
// loaded, and a teamA key could lock teamB/... (201).
func TestAPIKeyEntriesThatAllowEverythingStopStartup(t *testing.T) {
	for name, prefixes := range map[string]string{
		"missing":         "",
		"empty list":      `[]`,
		"empty prefix":    `[""]`,
		"star and others": `["teamA/","*"]`,
		"leading slash":   `["/teamA/"]`,
		"glob":            `["teamA/*"]`,
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			env := map[string]string{"LOCKGW_ADDR": "127.0.0.1:0", "LOCKGW_API_KEYS_FILE": keysFile(t, prefixes)}
			err := server.Run(ctx, nil, func(k string) string { return env[k] }, io.Discard, io.Discard)
			require.Error(t, err, "the gateway served with teamA's prefixes %s", prefixes)
			assert.Contains(t, err.Error(), "--api-keys-file")
			assert.Contains(t, err.Error(), `user "teamA"`)
		})
	}
}

// TestAPIKeyScopes: a scoped key locks only inside its prefixes; only "*"
// allows every key.
func TestAPIKeyScopes(t *testing.T) {
	g := apitest.Start(t, map[string]string{"LOCKGW_API_KEYS_FILE": keysFile(t, `["teamA/"]`)})
	c := apitest.NewClient(g.URL)
	for _, tc := range []struct {
		key, path string
		status    int
	}{
		{"a-key", "/locks/teamA/job", http.StatusCreated},
		{"a-key", "/locks/teamB/job", http.StatusForbidden},
		{"a-key", "/locks/teamAB/job", http.StatusForbidden},
		{"ops-key", "/locks/teamB/job", http.StatusCreated},
	} {
		r := c.Do(t, "PUT", tc.path, nil, "Authorization", "Bearer "+tc.key)
		assert.Equal(t, tc.status, r.Status, "%s on %s: %s", tc.key, tc.path, r.Body)
	}
}
