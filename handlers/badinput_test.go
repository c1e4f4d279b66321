package handlers_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
)

// TestBadInput sends malformed requests: each must get its documented 4xx
// problem, valid against openapi.yaml, and never a 5xx.
func TestBadInput(t *testing.T) {
	g := apitest.Start(t, nil)
	c := apitest.NewClient(g.URL)

	// A lock held by someone, for the token cases.
	held := "/locks/bad-input/held"
	r := c.Do(t, "PUT", held, nil)
	require.Equal(t, http.StatusCreated, r.Status)

	token := "valid-token-but-not-the-holder"
	json := apitest.JSON
	tests := []struct {
		name    string
		method  string
		path    string
		body    string
		headers []string
		status  int
		problem string
	}{
		// Keys.
		{"nul byte in key", "PUT", "/locks/a%00b", "", nil, 400, "malformed-request"},
		{"dot-dot segment", "PUT", "/locks/a/../b", "", nil, 400, "malformed-request"},
		{"dot segment", "PUT", "/locks/a/./b", "", nil, 400, "malformed-request"},
		{"key of 300 bytes", "PUT", "/locks/" + strings.Repeat("k", 300), "", nil, 400, "malformed-request"},
		{"key of 257 bytes", "GET", "/locks/" + strings.Repeat("k", 257), "", nil, 400, "malformed-request"},
		{"empty key", "PUT", "/locks/", "", nil, 400, "malformed-request"},
		{"trailing slash", "PUT", "/locks/jobs/", "", nil, 400, "malformed-request"},
		{"empty segment", "PUT", "/locks/jobs//nightly", "", nil, 400, "malformed-request"},
		{"escaped leading slash", "PUT", "/locks/%2Fjobs", "", nil, 400, "malformed-request"},
		{"space in key", "PUT", "/locks/a%20b", "", nil, 400, "malformed-request"},
		{"brace in key", "PUT", "/locks/a%7Bb%7D", "", nil, 400, "malformed-request"},
		{"non-ASCII key", "GET", "/locks/caf%C3%A9", "", nil, 400, "malformed-request"},
		// JSON.
		{"not JSON", "PUT", "/locks/k", "ttl=5", json, 400, "malformed-request"},
		{"truncated JSON", "PUT", "/locks/k", `{"ttl_ms":`, json, 400, "malformed-request"},
		{"array body", "PUT", "/locks/k", `[1,2]`, json, 400, "malformed-request"},
		{"null body", "PUT", "/locks/k", `null`, json, 400, "malformed-request"},
		{"string body", "PUT", "/locks/k", `"x"`, json, 400, "malformed-request"},
		{"unknown field", "PUT", "/locks/k", `{"ttl":5000}`, json, 400, "malformed-request"},
		{"duplicate field", "PUT", "/locks/k", `{"ttl_ms":5000,"ttl_ms":6000}`, json, 400, "malformed-request"},
		{"null field", "PUT", "/locks/k", `{"ttl_ms":null}`, json, 400, "malformed-request"},
		{"string ttl", "PUT", "/locks/k", `{"ttl_ms":"5000"}`, json, 400, "malformed-request"},
		{"fractional ttl", "PUT", "/locks/k", `{"ttl_ms":1.5}`, json, 400, "malformed-request"},
		{"numeric owner", "PUT", "/locks/k", `{"owner":7}`, json, 400, "malformed-request"},
		{"trailing data", "PUT", "/locks/k", `{"ttl_ms":5000} {}`, json, 400, "malformed-request"},
		{"trailing garbage", "PUT", "/locks/k", `{"ttl_ms":5000}x`, json, 400, "malformed-request"},
		{"field name in another case", "PUT", "/locks/k", `{"ttl_ms":100,"TTL_MS":20000}`, json, 400, "malformed-request"},
		{"invalid UTF-8 owner", "PUT", "/locks/k", "{\"owner\":\"a\xffb\"}", json, 400, "malformed-request"},
		{"integer beyond int64", "PUT", "/locks/k", `{"ttl_ms":99999999999999999999999}`, json, 400, "malformed-request"},
		{"wait_ms on extend", "PATCH", held, `{"wait_ms":5}`, append([]string{"Lock-Token", token}, json...), 400, "malformed-request"},
		// Values out of range.
		{"ttl zero", "PUT", "/locks/k", `{"ttl_ms":0}`, json, 422, "validation"},
		{"ttl negative", "PUT", "/locks/k", `{"ttl_ms":-5}`, json, 422, "validation"},
		{"ttl below 10", "PUT", "/locks/k", `{"ttl_ms":9}`, json, 422, "validation"},
		{"ttl above max", "PUT", "/locks/k", `{"ttl_ms":86400001}`, json, 422, "validation"},
		{"wait above max", "PUT", "/locks/k", `{"wait_ms":60001}`, json, 422, "validation"},
		{"negative wait", "PUT", "/locks/k", `{"wait_ms":-1}`, json, 422, "validation"},
		{"owner too long", "PUT", "/locks/k", `{"owner":"` + strings.Repeat("o", 129) + `"}`, json, 422, "validation"},
		{"owner not printable", "PUT", "/locks/k", `{"owner":"a\u0007b"}`, json, 422, "validation"},
		{"extend ttl zero", "PATCH", held, `{"ttl_ms":0}`, append([]string{"Lock-Token", token}, json...), 422, "validation"},
		// Size and type.
		{"huge body", "PUT", "/locks/k", `{"owner":"` + strings.Repeat("o", 70_000) + `"}`, json, 413, "body-too-large"},
		{"form content type", "PUT", "/locks/k", `ttl_ms=5000`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported-media-type"},
		{"text content type", "PUT", "/locks/k", `{"ttl_ms":5000}`, []string{"Content-Type", "text/plain"}, 415, "unsupported-media-type"},
		// Tokens.
		{"short chosen token", "PUT", "/locks/k", "", []string{"Lock-Token", "short"}, 400, "malformed-request"},
		{"chosen token with bad chars", "PUT", "/locks/k", "", []string{"Lock-Token", strings.Repeat("a", 22) + "!"}, 400, "malformed-request"},
		{"token too long", "DELETE", held, "", []string{"Lock-Token", strings.Repeat("a", 129)}, 400, "malformed-request"},
		{"weak If-Match", "PATCH", held, "", []string{"If-Match", `W/"` + token + `"`}, 400, "malformed-request"},
		{"unquoted If-Match", "DELETE", held, "", []string{"If-Match", token}, 400, "malformed-request"},
		{"If-Match star", "DELETE", held, "", []string{"If-Match", "*"}, 400, "malformed-request"},
		{"two If-Match tags", "DELETE", held, "", []string{"If-Match", `"` + token + `", "` + token + `x"`}, 400, "malformed-request"},
		{"headers disagree", "DELETE", held, "", []string{"Lock-Token", token, "If-Match", `"` + token + `-other"`}, 400, "malformed-request"},
		{"two Lock-Token headers", "DELETE", held, "", []string{"Lock-Token", token, "Lock-Token", token + "x"}, 400, "malformed-request"},
		{"If-Match on acquire", "PUT", "/locks/k", "", []string{"If-Match", `"` + token + `"`}, 400, "malformed-request"},
		{"If-Match star on acquire", "PUT", "/locks/k", "", []string{"If-Match", "*"}, 400, "malformed-request"},
		{"missing token on extend", "PATCH", held, "", nil, 428, "token-required"},
		{"missing token on release", "DELETE", held, "", nil, 428, "token-required"},
		{"wrong token on release", "DELETE", held, "", []string{"Lock-Token", token}, 412, "token-mismatch"},
		// Routing.
		{"unknown path", "GET", "/lock/k", "", nil, 404, "not-found"},
		{"PUT on the listing", "PUT", "/locks", "", nil, 405, "method-not-allowed"}, // GET /locks lists
		{"POST a lock", "POST", "/locks/k", "", nil, 405, "method-not-allowed"},
		{"DELETE healthz", "DELETE", "/healthz", "", nil, 405, "method-not-allowed"},
	}
	require.GreaterOrEqual(t, len(tests), 25)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			r := c.Do(t, tc.method, tc.path, body, tc.headers...)
			require.Less(t, r.Status, 500, "never a 5xx: %s", r.Body)
			require.Equal(t, tc.status, r.Status, "%s", r.Body)
			assert.Equal(t, tc.problem, r.ProblemType(t))
			if tc.status == http.StatusMethodNotAllowed {
				assert.NotEmpty(t, r.Header.Get("Allow"))
			}
			if tc.status == http.StatusUnprocessableEntity {
				errs, _ := r.Problem(t)["errors"].([]any)
				assert.NotEmpty(t, errs, "a validation problem names the fields")
			}
			assert.NotContains(t, string(r.Body), token, "a token is never echoed")
		})
	}

	// None of it touched the held lock.
	r = c.Do(t, "GET", held, nil)
	require.Equal(t, http.StatusOK, r.Status)
}

// TestBadBodyDetails: a 400 for a body says what was wrong and what to
// send, without echoing more of the body than a short field name.
func TestBadBodyDetails(t *testing.T) {
	g := apitest.Start(t, nil)
	c := apitest.NewClient(g.URL)
	long := strings.Repeat("n", 500)
	tests := []struct {
		name, body string
		detail     []string
		notEchoed  string
	}{
		// encoding/json matched TTL_MS to ttl_ms and the last one won.
		{"name in another case", `{"ttl_ms":100,"TTL_MS":20000}`, []string{`unknown field "TTL_MS"`, "case-sensitive", `did you mean "ttl_ms"`}, ""},
		{"unknown name lists the fields", `{"ttl":5000}`, []string{`unknown field "ttl"`, "owner, ttl_ms, wait_ms"}, ""},
		{"long unknown name is cut", `{"` + long + `":1}`, []string{`unknown field "` + long[:64] + `"…`}, long[:65]},
		// encoding/json rewrote the bad byte to U+FFFD and granted the lease.
		{"invalid UTF-8", "{\"owner\":\"a\xffb\"}", []string{"not valid UTF-8"}, ""},
		// "must be an integer, not a JSON number 99999999999999999999999".
		{"integer too large", `{"ttl_ms":99999999999999999999999}`, []string{`field "ttl_ms" is an integer too large`, "documented range"}, "99999999999999999999999"},
		{"negative integer too large", `{"wait_ms":-99999999999999999999999}`, []string{`field "wait_ms" is an integer too large`}, "99999999999999999999999"},
		{"fraction", `{"ttl_ms":1.5}`, []string{`field "ttl_ms" must be an integer, not a JSON number`}, "1.5"},
		{"huge number for a string", `{"owner":99999999999999999999999}`, []string{`field "owner" must be a string, not a JSON number`}, "99999999999999999999999"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := c.Do(t, "PUT", "/locks/"+apitest.Key(t), []byte(tc.body), apitest.JSON...)
			require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
			assert.Equal(t, "malformed-request", r.ProblemType(t))
			detail, _ := r.Problem(t)["detail"].(string)
			for _, want := range tc.detail {
				assert.Contains(t, detail, want)
			}
			if tc.notEchoed != "" {
				assert.NotContains(t, detail, tc.notEchoed)
			}
		})
	}
}

// TestIfMatchOnAcquireIsRefused: a PUT is not conditional, so an If-Match
// on it is a 400 that takes nothing, neither on a free key (it used to be
// granted with a fresh token, the condition ignored) nor on a key held by
// the very token named (no renewal), and says what to send instead.
func TestIfMatchOnAcquireIsRefused(t *testing.T) {
	g := apitest.Start(t, nil)
	c := apitest.NewClient(g.URL)
	path := "/locks/" + apitest.Key(t)

	r := c.Do(t, "PUT", path, nil, "If-Match", `"q3kVf1xZ8uQm2Rb7Lw0TnA"`)
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	assert.Equal(t, "malformed-request", r.ProblemType(t))
	assert.Contains(t, r.Problem(t)["detail"], "Lock-Token")
	assert.NotContains(t, string(r.Body), "q3kVf1xZ8uQm2Rb7Lw0TnA")
	assert.Empty(t, r.Header.Get("ETag"))
	r = c.Do(t, "GET", path, nil)
	require.Equal(t, http.StatusNotFound, r.Status, "the refused PUT took the lock: %s", r.Body)

	r = c.Do(t, "PUT", path, []byte(`{"ttl_ms":60000}`), apitest.JSON...)
	require.Equal(t, http.StatusCreated, r.Status)
	etag := r.Header.Get("ETag")
	r = c.Do(t, "PUT", path, []byte(`{"ttl_ms":5000}`), "If-Match", etag, "Content-Type", "application/json")
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	assert.Equal(t, "malformed-request", r.ProblemType(t))
	r = c.Do(t, "GET", path, nil)
	require.Equal(t, http.StatusOK, r.Status)
	assert.Greater(t, r.JSON(t)["ttl_ms"], float64(5000), "the refused PUT renewed the lease")
}

// TestValidationNamesEveryField: one 422 lists each bad field once.
func TestValidationNamesEveryField(t *testing.T) {
	g := apitest.Start(t, nil)
	r := apitest.NewClient(g.URL).Do(t, "PUT", "/locks/k", []byte(`{"ttl_ms":1,"wait_ms":999999999,"owner":"`+strings.Repeat("x", 200)+`"}`), apitest.JSON...)
	require.Equal(t, http.StatusUnprocessableEntity, r.Status)
	var fields []string
	for _, e := range r.Problem(t)["errors"].([]any) {
		fields = append(fields, e.(map[string]any)["field"].(string))
	}
	assert.ElementsMatch(t, []string{"ttl_ms", "wait_ms", "owner"}, fields)
}

// TestKeysWithSlashes: a key's "/" may be sent plain or escaped.
func TestKeysWithSlashes(t *testing.T) {
	g := apitest.Start(t, nil)
	c := apitest.NewClient(g.URL)
	r := c.Do(t, "PUT", "/locks/jobs%2Fnightly", nil)
	require.Equal(t, http.StatusCreated, r.Status)
	assert.Equal(t, "jobs/nightly", r.JSON(t)["key"])
	assert.Equal(t, "/locks/jobs/nightly", r.Header.Get("Location"))
	r = c.Do(t, "GET", "/locks/jobs/nightly", nil)
	require.Equal(t, http.StatusOK, r.Status)
	r = c.Do(t, "PUT", "/locks/user@example.com:cart/sku-1.2_3", nil)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
}

// TestDetailsAreBoundedAndSayWhatToDo: details quote at most a short part
// of what the client sent, and say what to send instead.
func TestDetailsAreBoundedAndSayWhatToDo(t *testing.T) {
	g := apitest.Start(t, nil)
	c := apitest.NewClient(g.URL)
	long := strings.Repeat("X", 2000)
	tests := []struct {
		name          string
		method, path  string
		headers       []string
		want, notEcho string
	}{
		{"long method", "PATCHX" + long, "/healthz", nil, "is not allowed here; use GET", long[:21]},
		{"long content type", "PUT", "/locks/k", []string{"Content-Type", "text/" + long}, "send Content-Type: application/json", long[:65]},
		{"doubled slash in key", "GET", "/locks/a//b", nil, "remove the extra /", ""},
		{"short token", "DELETE", "/locks/k", []string{"Lock-Token", "abc"}, "send the token an acquire returned", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body []byte
			if tc.method == "PUT" {
				body = []byte(`{}`)
			}
			r := c.Do(t, tc.method, tc.path, body, tc.headers...)
			require.GreaterOrEqual(t, r.Status, 400, "%s", r.Body)
			detail, _ := r.Problem(t)["detail"].(string)
			assert.Contains(t, detail, tc.want)
			if tc.notEcho != "" {
				assert.NotContains(t, detail, tc.notEcho)
			}
			assert.Less(t, len(detail), 400)
		})
	}
}
