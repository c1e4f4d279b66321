package handlers

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/lockgateway/lockgateway/problem"
)

// MaxKeyBytes is the longest lock key.
const MaxKeyBytes = 256

// LocksPrefix is where lock keys start in a URL path.
const LocksPrefix = "/locks/"

// KeyFromPath returns the key of a /locks/{key} or /semaphores/{key} request: the rest of the
// path, percent-decoded, so /locks/jobs%2Fnightly and /locks/jobs/nightly are
// the same key. It reads the escaped path itself rather than the router's
// wildcard, which is escaped or not depending on how the client wrote it.
func KeyFromPath(r *http.Request) (string, error) {
	raw, ok := strings.CutPrefix(r.URL.EscapedPath(), LocksPrefix)
	if !ok {
		raw, ok = strings.CutPrefix(r.URL.EscapedPath(), SemaphoresPrefix)
	}
	if !ok {
		return "", newError(problem.Malformed, "the lock key is missing: use /locks/{key}")
	}
	key, err := url.PathUnescape(raw)
	if err != nil {
		return "", newError(problem.Malformed, "the lock key has a malformed percent-escape; % must start an escape such as %2F (write a literal % as %25)")
	}
	if err := CheckKey(key); err != nil {
		return "", newError(problem.Malformed, err.Error())
	}
	return key, nil
}

// CheckKey enforces the key rules: 1–256 bytes of A–Z a–z 0–9 . _ - : @ and
// "/" as a separator between non-empty segments that are not "." or "..".
// Braces are never allowed: they would break the Redis hash tag.
func CheckKey(key string) error {
	if key == "" {
		return fmt.Errorf("the lock key is empty; name the resource, as in /locks/jobs/nightly")
	}
	if len(key) > MaxKeyBytes {
		return fmt.Errorf("the lock key is %d bytes; the limit is %d: use a shorter name, or a hash of a long one", len(key), MaxKeyBytes)
	}
	for i := 0; i < len(key); i++ {
		if !keyByte(key[i]) {
			return fmt.Errorf("the lock key may hold only A-Z a-z 0-9 . _ - : @ and /, not %s at byte offset %d", character(key[i:]), i)
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return fmt.Errorf("the lock key has an empty segment (a leading, trailing or doubled /); remove the extra /")
		case ".", "..":
			return fmt.Errorf("the lock key has a %q segment", seg)
		}
	}
	return nil
}

// CheckKeyPrefix says why no lock key can start with prefix (an API key's
// allowed prefix), or nil: some key does. Prefixes are plain strings, not
// patterns, and keys never start with "/".
func CheckKeyPrefix(prefix string) error {
	if prefix == "" {
		return fmt.Errorf("the prefix is empty")
	}
	// Some key prefix+rest is valid iff the prefix is a key itself or
	// prefix+"x" is one: "x" closes the last segment as any rest would,
	// without making it empty, "." or "..".
	if CheckKey(prefix) == nil {
		return nil
	}
	if err := CheckKey(prefix + "x"); err != nil {
		return fmt.Errorf("no lock key starts with it (a prefix is plain text, not a pattern): %w", err)
	}
	return nil
}

// character names the character s starts with as a reader can find it:
// its code point and itself, U+00E9 'é' (an escape such as '\x00' for one
// that does not print), or the byte when s is not UTF-8 there.
func character(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && size <= 1 {
		return fmt.Sprintf("the byte 0x%02X (not UTF-8)", s[0])
	}
	return fmt.Sprintf("%U %q", r, r)
}

func keyByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("._-:@/", c) >= 0
}

// Token length bounds: 22 characters is 128 bits of base64.
const (
	MinTokenLen = 22
	MaxTokenLen = 128
)

// CheckToken enforces the token rules: 22–128 of A–Z a–z 0–9 _ -.
// The error never repeats the token.
func CheckToken(token string) error {
	if len(token) < MinTokenLen || len(token) > MaxTokenLen {
		return fmt.Errorf("a lock token is %d to %d characters, not %d: send the token an acquire returned", MinTokenLen, MaxTokenLen, len(token))
	}
	for i := 0; i < len(token); i++ {
		c := token[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("a lock token may hold only A-Z a-z 0-9 _ and -: send the token an acquire returned")
		}
	}
	return nil
}

// tokenFromHeaders reads the caller's token from Lock-Token or If-Match
// ("<token>", the ETag an acquire returned). It returns "" when neither is
// present; a malformed value, or two that disagree, is a 400. Where If-Match
// is not allowed (an acquire) it is a 400 too: RFC 9110 says a request whose
// If-Match fails must not be carried out, so ignoring it would answer a
// conditional request as if it were unconditional, and treating it as the
// acquire's Lock-Token would take a lock the condition said not to.
func tokenFromHeaders(r *http.Request, allowIfMatch bool) (string, error) {
	token := header(r.Header, hdrLockToken)
	if token != "" || len(r.Header[hdrLockToken]) > 0 {
		if len(r.Header[hdrLockToken]) > 1 {
			return "", newError(problem.Malformed, "more than one Lock-Token header: send one")
		}
		if err := CheckToken(token); err != nil {
			return "", newError(problem.Malformed, "Lock-Token: "+err.Error())
		}
	}
	if !allowIfMatch {
		if len(r.Header[hdrIfMatch]) > 0 {
			return "", newError(problem.Malformed, "If-Match is not accepted on an acquire: a PUT is not conditional. "+
				"To retry an acquire, send the same Lock-Token; to extend a lease you hold, PATCH it with If-Match or Lock-Token")
		}
		return token, nil
	}
	ifMatch := strings.TrimSpace(strings.Join(r.Header[hdrIfMatch], ","))
	if ifMatch == "" {
		return token, nil
	}
	etag, ok := strings.CutPrefix(ifMatch, `"`)
	etag, ok2 := strings.CutSuffix(etag, `"`)
	if !ok || !ok2 || strings.ContainsAny(etag, `",`) {
		return "", newError(problem.Malformed, `If-Match must be one strong entity tag, "<token>", as the acquire's ETag`)
	}
	if err := CheckToken(etag); err != nil {
		return "", newError(problem.Malformed, "If-Match: "+err.Error())
	}
	if token != "" && token != etag {
		return "", newError(problem.Malformed, "Lock-Token and If-Match name different tokens: send one of them")
	}
	return etag, nil
}
