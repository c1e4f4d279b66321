package handlers_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
)

// TestHugeKeyGetsASmallAnswer: a 20 000-character key is refused with a
// body that does not repeat it: instance is cut, and the detail gives the
// length only.
func TestHugeKeyGetsASmallAnswer(t *testing.T) {
	g := apitest.Start(t, nil)
	c := apitest.NewClient(g.URL)
	huge := strings.Repeat("k", 20_000)
	for _, path := range []string{"/locks/" + huge, "/semaphores/" + huge, "/locks/%C3%A9" + huge} {
		for _, method := range []string{"PUT", "GET"} {
			r := c.Do(t, method, path, nil)
			assert.Equal(t, http.StatusBadRequest, r.Status)
			assert.Less(t, len(r.Body), 1024, "%s %.20s…: %d bytes of body", method, path, len(r.Body))
			p := r.Problem(t)
			assert.True(t, strings.HasSuffix(p["instance"].(string), "…"), "instance is cut: %v", p["instance"])
		}
	}
	// A path of a valid key of the longest length is repeated whole.
	longest := "/semaphores/" + strings.Repeat("k", 256)
	r := c.Do(t, "GET", longest, nil)
	require.Equal(t, http.StatusNotFound, r.Status)
	assert.Equal(t, longest, r.Problem(t)["instance"])
}

// TestKeyCharacterNamed: a key with a character outside the alphabet is
// refused with the character named, code point and all, and where it is,
// never a lone byte of it.
func TestKeyCharacterNamed(t *testing.T) {
	g := apitest.Start(t, nil)
	c := apitest.NewClient(g.URL)
	for path, want := range map[string]string{
		"/locks/caf%C3%A9":         `not U+00E9 'é' at byte offset 3`,
		"/locks/jobs/%E2%9C%93":    `not U+2713 '✓' at byte offset 5`,
		"/locks/a%20b":             `not U+0020 ' ' at byte offset 1`,
		"/locks/a%00b":             `not U+0000 '\x00' at byte offset 1`,
		"/locks/a%FFb":             `not the byte 0xFF (not UTF-8) at byte offset 1`,
		"/semaphores/%F0%9F%94%92": `not U+1F512 '🔒' at byte offset 0`,
	} {
		r := c.Do(t, "GET", path, nil)
		require.Equal(t, http.StatusBadRequest, r.Status, path)
		assert.Equal(t, "the lock key may hold only A-Z a-z 0-9 . _ - : @ and /, "+want, r.Problem(t)["detail"], path)
	}
}

// TestLimitMismatchNamesTheLimit: the 409 says which limit the holders use.
func TestLimitMismatchNamesTheLimit(t *testing.T) {
	g := apitest.Start(t, nil)
	c := apitest.NewClient(g.URL)
	key := "/semaphores/" + apitest.Key(t)
	r := c.Do(t, "PUT", key, []byte(`{"limit":3}`), apitest.JSON...)
	require.Equal(t, http.StatusCreated, r.Status)
	r = c.Do(t, "PUT", key, []byte(`{"limit":5}`), apitest.JSON...)
	require.Equal(t, http.StatusConflict, r.Status)
	assert.Equal(t, "limit-mismatch", r.ProblemType(t))
	assert.Contains(t, r.Problem(t)["detail"], "granted under limit 3")
	assert.Contains(t, r.Problem(t)["detail"], "use limit 3")
}

// TestReadOfADownBackend: a GET that met a Redis that does not answer is
// told to retry, never to retry "with the same Lock-Token" it does not
// have; a write still is.
func TestReadOfADownBackend(t *testing.T) {
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", redistest.FreePort(t)) // nothing listens there
	g := apitest.Start(t, map[string]string{"LOCKGW_BACKEND": "redis", "LOCKGW_REDIS_URL": url})
	c := apitest.NewClient(g.URL)
	for _, path := range []string{"/locks/jobs/nightly", "/semaphores/exports"} {
		r := c.Do(t, "GET", path, nil)
		require.Equal(t, http.StatusServiceUnavailable, r.Status, path)
		detail := r.Problem(t)["detail"].(string)
		assert.NotContains(t, detail, "Lock-Token", path)
		assert.Contains(t, detail, "a read changes nothing, retry it", path)
	}
	r := c.Do(t, "PUT", "/locks/jobs/nightly", nil)
	require.Equal(t, http.StatusServiceUnavailable, r.Status)
	assert.Contains(t, r.Problem(t)["detail"], "retry with the same Lock-Token")
}
