package handlers

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEscapeKeyPlain: the plain-key shortcut gives url.PathEscape's text,
// for every byte in every position.
func TestEscapeKeyPlain(t *testing.T) {
	slow := func(key string) string {
		segs := strings.Split(key, "/")
		for i, s := range segs {
			segs[i] = url.PathEscape(s)
		}
		return strings.Join(segs, "/")
	}
	for c := 0; c < 256; c++ {
		for _, key := range []string{string(rune(c)), "a" + string([]byte{byte(c)}) + "/b", "jobs/nightly-" + string([]byte{byte(c)})} {
			require.Equal(t, slow(key), escapeKey(key), "key %q", key)
		}
	}
	assert.True(t, plainPath("jobs/nightly_2026.01~x-Y"))
}
