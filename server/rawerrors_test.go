package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
)

// TestUnparseableRequestsGetProblems: requests net/http refuses before any
// handler runs used to get its text/plain "400 Bad Request"; they get the
// documented problem+json, with a request id that is also in the log.
func TestUnparseableRequestsGetProblems(t *testing.T) {
	t.Parallel()
	g := apitest.Start(t, nil)
	tests := []struct {
		name, request, detail string
	}{
		{"malformed percent-escape", "GET /locks/%zz HTTP/1.1\r\nHost: gateway\r\n\r\n", "write a literal % as %25"},
		{"truncated percent-escape", "PUT /locks/jobs%2 HTTP/1.1\r\nHost: gateway\r\n\r\n", "percent-encoded"},
		{"header line without a colon", "GET /healthz HTTP/1.1\r\nHost: gateway\r\nno colon here\r\n\r\n", "could not be parsed"},
		{"no Host header", "GET /healthz HTTP/1.1\r\n\r\n", "missing required Host header"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, g.URL)
			_, err := io.WriteString(c.conn, tc.request)
			require.NoError(t, err)
			require.NoError(t, c.conn.SetReadDeadline(time.Now().Add(10*time.Second)))
			resp, err := http.ReadResponse(c.br, nil)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			r := &apitest.Response{Status: resp.StatusCode, Header: resp.Header, Body: body}
			require.Equal(t, http.StatusBadRequest, r.Status, "%s", body)
			apitest.CheckProblem(t, r)
			assert.Equal(t, "malformed-request", r.ProblemType(t))
			assert.Contains(t, r.Problem(t)["detail"], tc.detail)
			assert.True(t, resp.Close, "net/http closes the connection after it")
			id := r.Header.Get("X-Request-Id")
			assert.Eventually(t, func() bool { return strings.Contains(g.Logs.String(), id) }, 5*time.Second, 10*time.Millisecond,
				"the access log has the request id") // the log is buffered
		})
	}

	// Headers over the limit: net/http's own 431, rewritten too.
	t.Run("headers over the limit", func(t *testing.T) {
		c := dialRaw(t, g.URL)
		big := strings.Repeat("a", 40<<10)
		_, err := io.WriteString(c.conn, "GET /locks/"+apitest.Key(t)+" HTTP/1.1\r\nHost: gateway\r\nX-Big: "+big+"\r\n\r\n")
		require.NoError(t, err)
		require.NoError(t, c.conn.SetReadDeadline(time.Now().Add(10*time.Second)))
		resp, err := http.ReadResponse(c.br, nil)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		r := &apitest.Response{Status: resp.StatusCode, Header: resp.Header, Body: body}
		require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, r.Status, "%s", body)
		apitest.CheckProblem(t, r)
		assert.Equal(t, "headers-too-large", r.ProblemType(t))
		assert.Contains(t, r.Problem(t)["detail"], "32 KiB")
		assert.NotContains(t, string(body), "aaaa", "nothing of the headers is echoed")
		assert.True(t, resp.Close)
	})

	// A request that parses is untouched, on the same kind of connection.
	c := dialRaw(t, g.URL)
	assert.Equal(t, http.StatusOK, c.do("GET", "/healthz", ""))
	assert.Equal(t, http.StatusNotFound, c.do("GET", "/locks/"+strings.ReplaceAll(apitest.Key(t), "/", "%2F"), ""))
}
