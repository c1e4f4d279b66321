// Package randid makes the random identifiers the gateway and its tools hand
// out: lock tokens, rate-limit window ids, waiters' tickets. Each comes from
// crypto/rand, so none can be guessed from another. (Request ids, which
// are no secret, come from middleware.NewRequestID.)
package randid

import (
	"crypto/rand"
	"encoding/base64"
)

// New returns n random bytes as URL-safe base64 without padding: 22
// characters for 16 bytes (128 bits), 16 for 12.
func New(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go ≥ 1.24)
	return base64.RawURLEncoding.EncodeToString(b)
}
