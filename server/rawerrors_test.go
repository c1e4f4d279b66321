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
// handler runs used to get its text/plain "400 Bad Request" (or "431" for
// oversized headers); they get the documented problem+json, with a request
// id that is also in the log.
func TestUnparseableRequestsGetProblems(t *testing.T) {
	t.Parallel()
	g := apitest.Start(t, nil)
	big := strings.Repeat("a", 40<<10)
	tests := []struct {
		name, request, detail string
		status                int
		kind                  string
	}{
		{"malformed percent-escape", "GET /locks/%zz HTTP/1.1\r\nHost: gateway\r\n\r\n", "write a literal % as %25", 400, "malformed-request"},
		{"truncated percent-escape", "PUT /locks/jobs%2 HTTP/1.1\r\nHost: gateway\r\n\r\n", "percent-encoded", 400, "malformed-request"},
		{"header line without a colon", "GET /healthz HTTP/1.1\r\nHost: gateway\r\nno colon here\r\n\r\n", "could not be parsed", 400, "malformed-request"},
		{"no Host header", "GET /healthz HTTP/1.1\r\n\r\n", "missing required Host header", 400, "malformed-request"},
		// net/http's own 431, rewritten too; nothing of the headers echoed.
		{"headers over the limit", "GET /healthz HTTP/1.1\r\nHost: gateway\r\nX-Big: " + big + "\r\n\r\n", "32 KiB", 431, "headers-too-large"},
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
			require.Equal(t, tc.status, r.Status, "%s", body)
			apitest.CheckProblem(t, r)
			assert.Equal(t, tc.kind, r.ProblemType(t))
			assert.Contains(t, r.Problem(t)["detail"], tc.detail)
			assert.NotContains(t, string(body), "aaaa")
			assert.True(t, resp.Close, "net/http closes the connection after it")
			id := r.Header.Get("X-Request-Id")
			assert.Eventually(t, func() bool { return strings.Contains(g.Logs.String(), id) }, 5*time.Second, 10*time.Millisecond,
				"the access log has the request id") // the log is buffered
		})
	}

	// A request that parses is untouched, on the same kind of connection.
	c := dialRaw(t, g.URL)
	assert.Equal(t, http.StatusOK, c.do("GET", "/healthz", ""))
	assert.Equal(t, http.StatusNotFound, c.do("GET", "/locks/"+strings.ReplaceAll(apitest.Key(t), "/", "%2F"), ""))
}
