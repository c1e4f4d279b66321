package handlers

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// sameAsEncode checks that encodeLease answers l exactly as encode does:
// status, headers and body bytes.
func sameAsEncode(t *testing.T, status int, l leaseBody) {
	t.Helper()
	want, got := httptest.NewRecorder(), httptest.NewRecorder()
	encode(want, status, "application/json", l)
	encodeLease(got, status, l)
	assert.Equal(t, want.Code, got.Code)
	assert.Equal(t, want.Header(), got.Header())
	assert.Equal(t, want.Body.String(), got.Body.String())
}

func TestEncodeLeaseMatchesEncode(t *testing.T) {
	for _, l := range []leaseBody{
		{Key: "jobs/nightly", Token: "tok_-AZaz09", Fence: 1, TTLms: 30000, ExpiresAt: "2026-11-24T15:04:05.123Z"},
		{Key: "k", Token: "t", Fence: 9223372036854775807, Owner: "worker-7 <ops@example.com> & co", TTLms: 10, ExpiresAt: "x"},
		{Key: "a b/c%20d", Token: "t", Fence: -1, Owner: "", TTLms: 0},
		// Strings encode escapes or writes differently: the slow path.
		{Key: `quote"d\`, Token: "t", Fence: 2, Owner: "tab\there", TTLms: 5},
		{Key: "clé/日本", Token: "t", Owner: "\u2028\u2029", ExpiresAt: "\x7f"},
		{Key: "bad\xffutf8", Token: "t", Owner: "\x00\x1f"},
	} {
		sameAsEncode(t, 201, l)
		sameAsEncode(t, 200, l)
	}
}

func FuzzEncodeLease(f *testing.F) {
	f.Add("jobs/nightly", "tok", int64(3), "worker-7", int64(30000), "2026-11-24T15:04:05.123Z")
	f.Add(`q"\`, "t", int64(-1), "<&>", int64(0), "")
	f.Fuzz(func(t *testing.T, key, token string, fence int64, owner string, ttl int64, expires string) {
		sameAsEncode(t, 201, leaseBody{Key: key, Token: token, Fence: fence, Owner: owner, TTLms: ttl, ExpiresAt: expires})
	})
}

// TestTimestampMatchesFormat: timestamp writes what time.Format does with
// its layout, truncated to the millisecond, in UTC.
func TestTimestampMatchesFormat(t *testing.T) {
	for _, tc := range []time.Time{
		time.Date(2026, 11, 24, 15, 4, 5, 123_999_999, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", -7*3600)),
		time.Date(1999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
		time.Date(1000, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999_000_000, time.UTC),
		time.Date(999, 1, 1, 0, 0, 0, 0, time.UTC), // Format's path
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Now(),
		time.Unix(0, 0),
	} {
		assert.Equal(t, tc.UTC().Truncate(time.Millisecond).Format(timestampLayout), timestamp(tc), tc.String())
	}
}

func FuzzTimestamp(f *testing.F) {
	f.Add(int64(1795535614), int64(123456789))
	f.Fuzz(func(t *testing.T, sec, nsec int64) {
		tc := time.Unix(sec, nsec)
		assert.Equal(t, tc.UTC().Truncate(time.Millisecond).Format(timestampLayout), timestamp(tc))
	})
}
