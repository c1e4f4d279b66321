package handlers

import (
	"net/textproto"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestHeaderNamesCanonical: the names the handlers index Header with
// directly are the ones net/http stores, or a client's header would go
// unseen and ours would be sent twice under two spellings.
func TestHeaderNamesCanonical(t *testing.T) {
	for _, name := range []string{hdrContentType, hdrContentLength, hdrLockToken, hdrIfMatch, hdrETag, hdrLocation,
		hdrPrefer, hdrPreferenceAppl, hdrVary} {
		assert.Equal(t, textproto.CanonicalMIMEHeaderKey(name), name)
	}
}
