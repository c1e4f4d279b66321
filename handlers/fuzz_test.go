package handlers

// Fuzz targets for the parsers every lock request goes through: the key in
// the path and the token in Lock-Token / If-Match. `go test` runs their seeds
// (the f.Add calls and testdata/fuzz/<Fuzz…>/); `go test -fuzz` explores.
// Each checks the parser against an independent oracle (the pattern
// openapi.yaml publishes, and the rules written out by hand), so a fuzzer
// finding is a disagreement, not only a panic.

import (
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/lockgateway/lockgateway"

	"github.com/lockgateway/lockgateway/problem"
)

var (
	specPatternsOnce sync.Once
	specKeyPattern   *regexp.Regexp
	specTokenPattern *regexp.Regexp
)

// specPatterns returns the LockKey and Token patterns of openapi.yaml: what
// the contract promises clients, to hold the parsers to.
func specPatterns(t testing.TB) (key, token *regexp.Regexp) {
	t.Helper()
	specPatternsOnce.Do(func() {
		doc, err := openapi3.NewLoader().LoadFromData(lockgateway.OpenAPI)
		if err != nil {
			return
		}
		pattern := func(name string) *regexp.Regexp {
			s := doc.Components.Schemas[name]
			if s == nil || s.Value == nil || s.Value.Pattern == "" {
				return nil
			}
			return regexp.MustCompile(s.Value.Pattern)
		}
		specKeyPattern, specTokenPattern = pattern("LockKey"), pattern("Token")
	})
	if specKeyPattern == nil || specTokenPattern == nil {
		t.Fatal("openapi.yaml: no pattern for LockKey or Token")
	}
	return specKeyPattern, specTokenPattern
}

// keyRulesHold spells out the documented key rules without sharing code
// with CheckKey.
func keyRulesHold(key string) bool {
	if len(key) < 1 || len(key) > 256 {
		return false
	}
	if strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") {
		return false
	}
	for _, c := range []byte(key) {
		ok := c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("._-:@/", c) >= 0
		if !ok {
			return false
		}
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// requestFor is a request whose path is /locks/ followed by escaped, parsed
// as net/http parses a request line; nil when net/http would refuse it.
func requestFor(escaped string) *http.Request {
	u, err := url.ParseRequestURI(LocksPrefix + escaped)
	if err != nil {
		return nil
	}
	return &http.Request{Method: http.MethodPut, URL: u, Header: http.Header{}}
}

// checkRoundTrip: an accepted key, escaped as the server escapes it for
// Location, and also sent plain, comes back as the same key.
func checkRoundTrip(t *testing.T, key string) {
	t.Helper()
	for _, path := range []string{escapeKey(key), key} {
		r := requestFor(path)
		if r == nil {
			t.Fatalf("key %q: %q is not a request URI", key, LocksPrefix+path)
		}
		got, err := KeyFromPath(r)
		if err != nil {
			t.Fatalf("key %q sent as %q: %v", key, LocksPrefix+path, err)
		}
		if got != key {
			t.Fatalf("key %q sent as %q came back as %q", key, LocksPrefix+path, got)
		}
	}
	if loc := LocksPrefix + escapeKey(key); strings.ContainsAny(loc, "?#%") {
		t.Fatalf("key %q: Location %q holds a query, fragment or escape", key, loc)
	}
}

var keySeeds = []string{
	"jobs/nightly", "k", "user@example.com:cart/sku-1.2_3", "...", "..a", ".a/b.",
	"", "/", "a/", "/a", "a//b", "a/./b", "a/../b", ".", "..", "a b", "a{b}", "caf\xc3\xa9",
	"a\x00b", "a%2Fb", strings.Repeat("k", 256), strings.Repeat("k", 257), strings.Repeat("a/", 128),
}

// FuzzCheckKey: CheckKey accepts exactly the keys the documented rules and
// openapi.yaml's LockKey pattern accept, and every accepted key survives the
// trip through a URL.
func FuzzCheckKey(f *testing.F) {
	for _, k := range keySeeds {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		keyPattern, _ := specPatterns(t)
		err := CheckKey(key)
		rules := keyRulesHold(key)
		spec := len(key) <= 256 && keyPattern.MatchString(key)
		if (err == nil) != rules || rules != spec {
			t.Fatalf("key %q: CheckKey error %v, documented rules hold %v, openapi.yaml pattern matches %v", key, err, rules, spec)
		}
		if err == nil {
			checkRoundTrip(t, key)
		}
	})
}

// FuzzKeyFromPath: whatever follows /locks/ in a request line, an accepted
// key obeys the rules and round-trips; a refused one is a 400 problem.
func FuzzKeyFromPath(f *testing.F) {
	for _, k := range keySeeds {
		f.Add(k)
	}
	for _, p := range []string{
		"jobs%2Fnightly", "%2Fjobs", "jobs%2F", "a%2F%2Fb", "a%2F.%2Fb", "a%2F..%2Fb", "%2e%2e", "%2E",
		"a%00b", "a%zzb", "a%", "a%2", "a?b=c", "a#b", "a;b", "a%3Fb", "%41%42", "a%7Bb%7D", "a%2fb",
		"caf%C3%A9", "a+b", "a%20b", "a%25b", "%252F",
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, escaped string) {
		r := requestFor(escaped)
		if r == nil {
			return // net/http answers 400 before any handler runs
		}
		key, err := KeyFromPath(r)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Kind != problem.Malformed {
				t.Fatalf("path %q: error %v is not a malformed-request problem", r.URL.EscapedPath(), err)
			}
			return
		}
		if !keyRulesHold(key) || CheckKey(key) != nil {
			t.Fatalf("path %q gave key %q, which breaks the key rules", r.URL.EscapedPath(), key)
		}
		checkRoundTrip(t, key)
	})
}

var tokenSeeds = []string{
	"q3kVf1xZ8uQm2Rb7Lw0TnA", "nightly-2026-11-20-run-0001", strings.Repeat("a", 21), strings.Repeat("a", 22),
	strings.Repeat("Z", 128), strings.Repeat("_", 129), "", "short", strings.Repeat("a", 22) + "!",
	strings.Repeat("a", 22) + "=", `"` + strings.Repeat("a", 22) + `"`, strings.Repeat("é", 11),
	strings.Repeat("a", 21) + "\x00", " " + strings.Repeat("a", 22),
}

// leaks reports whether msg repeats secret. Short strings are skipped: "a"
// is in every sentence, and a real token is at least MinTokenLen long.
func leaks(msg, secret string) bool {
	return len(secret) >= MinTokenLen && strings.Contains(msg, secret)
}

// tokenClass keeps what CheckToken may say about a token (its length and
// which bytes are allowed) and drops the token itself.
func tokenClass(token string) string {
	b := []byte(token)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b[i] = 'x'
		} else {
			b[i] = '!'
		}
	}
	return string(b)
}

// FuzzCheckToken: CheckToken accepts exactly openapi.yaml's Token pattern,
// and its error is the same for any token of the same shape: it says
// nothing of the token's content.
func FuzzCheckToken(f *testing.F) {
	for _, tok := range tokenSeeds {
		f.Add(tok)
	}
	f.Fuzz(func(t *testing.T, token string) {
		_, tokenPattern := specPatterns(t)
		err := CheckToken(token)
		if want := tokenPattern.MatchString(token); (err == nil) != want {
			t.Fatalf("token %q: CheckToken error %v, openapi.yaml pattern matches %v", token, err, want)
		}
		if err == nil {
			return
		}
		masked := CheckToken(tokenClass(token))
		if masked == nil || masked.Error() != err.Error() {
			t.Fatalf("token %q: error %q depends on the token's content (same-shape token: %v)", token, err, masked)
		}
		if leaks(err.Error(), token) {
			t.Fatalf("token %q: error repeats it: %q", token, err)
		}
	})
}

// FuzzTokenFromHeaders: for any Lock-Token and If-Match headers (values
// separated by newlines, which no real header value holds), the token read
// is one the caller sent and a valid one; an If-Match where it is not
// accepted is refused; a refusal is a 400 that repeats none of the values.
func FuzzTokenFromHeaders(f *testing.F) {
	tok := "q3kVf1xZ8uQm2Rb7Lw0TnA"
	for _, s := range []struct {
		lockToken, ifMatch     string
		hasLockToken, hasMatch bool
		allowIfMatch           bool
	}{
		{tok, "", true, false, false},
		{tok, "", true, false, true},
		{"", `"` + tok + `"`, false, true, true},
		{"", `"` + tok + `"`, false, true, false},
		{tok, `"` + tok + `"`, true, true, true},
		{tok, `"` + tok + `x"`, true, true, true},
		{tok + "\n" + tok, "", true, false, true},
		{"", "", true, false, true},
		{"", `W/"` + tok + `"`, false, true, true},
		{"", tok, false, true, true},
		{"", "*", false, true, true},
		{"", `"` + tok + `", "` + tok + `"`, false, true, true},
		{"", `"` + tok + `"` + "\n" + `"` + tok + `"`, false, true, true},
		{"", ` "` + tok + `" `, false, true, true},
		{"", `""`, false, true, true},
		{"", `"`, false, true, true},
		{"short", "", true, false, true},
		{"", `"short"`, false, true, true},
	} {
		f.Add(s.lockToken, s.ifMatch, s.hasLockToken, s.hasMatch, s.allowIfMatch)
	}
	f.Fuzz(func(t *testing.T, lockToken, ifMatch string, hasLockToken, hasIfMatch, allowIfMatch bool) {
		_, tokenPattern := specPatterns(t)
		r := &http.Request{Header: http.Header{}}
		var lockTokens, ifMatches []string
		if hasLockToken {
			lockTokens = strings.Split(lockToken, "\n")
			r.Header["Lock-Token"] = lockTokens
		}
		if hasIfMatch {
			ifMatches = strings.Split(ifMatch, "\n")
			r.Header["If-Match"] = ifMatches
		}
		token, err := tokenFromHeaders(r, allowIfMatch)
		if !allowIfMatch && len(ifMatches) > 0 && err == nil {
			t.Fatalf("If-Match %q where it is not accepted (an acquire) was not refused", ifMatches)
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Kind != problem.Malformed {
				t.Fatalf("error %v is not a malformed-request problem", err)
			}
			for _, v := range append(append([]string{}, lockTokens...), ifMatches...) {
				for _, secret := range []string{v, strings.TrimSpace(v), strings.Trim(strings.TrimSpace(v), `"`)} {
					if leaks(e.Detail, secret) {
						t.Fatalf("the problem detail %q repeats the header value %q", e.Detail, v)
					}
				}
			}
			return
		}
		if token == "" {
			if len(lockTokens) > 0 {
				t.Fatalf("Lock-Token %q was sent but no token read", lockTokens)
			}
			if allowIfMatch && strings.TrimSpace(strings.Join(ifMatches, "")) != "" {
				t.Fatalf("If-Match %q was sent but no token read", ifMatches)
			}
			return
		}
		if !tokenPattern.MatchString(token) {
			t.Fatalf("token %q read from the headers does not match openapi.yaml's Token pattern", token)
		}
		fromLockToken := len(lockTokens) == 1 && lockTokens[0] == token
		fromIfMatch := allowIfMatch && strings.Contains(strings.Join(ifMatches, ","), `"`+token+`"`)
		if !fromLockToken && !fromIfMatch {
			t.Fatalf("token %q was not sent (Lock-Token %q, If-Match %q, If-Match allowed %v)", token, lockTokens, ifMatches, allowIfMatch)
		}
		if !allowIfMatch && !fromLockToken {
			t.Fatalf("token %q taken from If-Match where only Lock-Token counts", token)
		}
		if len(lockTokens) == 1 && lockTokens[0] != token {
			t.Fatalf("Lock-Token %q and the token read %q differ", lockTokens[0], token)
		}
	})
}
