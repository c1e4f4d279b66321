package server_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
)

// TestUIServed: /ui/ serves the page and its two files, each with a
// policy that allows only the gateway's own script and style; anything
// else below /ui/ is the gateway's 404 problem; off, there is no /ui/.
func TestUIServed(t *testing.T) {
	g := apitest.Start(t, map[string]string{"LOCKGW_UI": "true"})
	c := apitest.NewClient(g.URL)
	c.HTTP.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for path, ctype := range map[string]string{"/ui/": "text/html", "/ui/app.js": "text/javascript", "/ui/watch.js": "text/javascript", "/ui/style.css": "text/css"} {
		r := c.Do(t, "GET", path, nil)
		require.Equal(t, http.StatusOK, r.Status, path)
		assert.Contains(t, r.Header.Get("Content-Type"), ctype, path)
		assert.Contains(t, r.Header.Get("Content-Security-Policy"), "script-src 'self';", path)
		assert.Equal(t, "nosniff", r.Header.Get("X-Content-Type-Options"), path)
	}
	assert.Equal(t, http.StatusNotFound, c.Do(t, "GET", "/ui/nope.js", nil).Status)
	assert.Equal(t, http.StatusNotFound, c.Do(t, "GET", "/ui/index.html", nil).Status)
	r := c.Do(t, "GET", "/ui", nil)
	assert.Equal(t, http.StatusMovedPermanently, r.Status)
	assert.Equal(t, "/ui/", r.Header.Get("Location"))

	off := apitest.NewClient(apitest.Start(t, map[string]string{"LOCKGW_UI": "false"}).URL)
	assert.Equal(t, http.StatusNotFound, off.Do(t, "GET", "/ui/", nil).Status)
}
