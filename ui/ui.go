// Package ui is the gateway's live dashboard at /ui/: one page, embedded
// in the binary (no build step, nothing fetched from elsewhere, so it
// works offline), that reads the public API from the browser (GET /locks,
// GET /readyz) and updates itself; with an API key that administers lock
// keys (GET /whoami), it offers their forced release (DELETE ?force=true).
// It holds no state on the server and never sees a token: listings have
// none.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var static embed.FS

// Handler serves the dashboard's files, to be mounted at /ui/; any other
// path below it gets notFound (the gateway's problem+json 404, not the
// file server's text). Every answer
// forbids what the page does not need: scripts and styles from elsewhere
// or inline (so data the page shows, an owner label, can never run as
// code), framing, and sending the page's address on.
func Handler(notFound http.Handler) http.Handler {
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded folder is part of the build
	}
	fileServer := http.StripPrefix("/ui/", http.FileServer(http.FS(files)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/ui/")
		if name == "" {
			name = "index.html"
		}
		if _, err := fs.Stat(files, name); err != nil || name == "index.html" && r.URL.Path != "/ui/" {
			notFound.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		// Small files, and a new gateway version may change them.
		h.Set("Cache-Control", "no-cache")
		fileServer.ServeHTTP(w, r)
	})
}
