package handlers_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/handlers"
	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/memory"
	"github.com/lockgateway/lockgateway/middleware"
)

// acquireStatuses are the statuses docs/http-api.md gives a PUT that the
// handler itself decides (no rate limit, no API keys, a store that answers).
var acquireStatuses = []int{200, 201, 400, 409, 413, 415, 422}

// holderToken holds the key before the request when the fuzzer asks for a
// lock held by someone else; no response may ever show it.
const holderToken = "someone-elses-token-0123456789"

// fuzzLimits keep waits short, so a wait_ms or Prefer: wait costs a fuzz
// run milliseconds, and the body limit low enough for the fuzzer to cross.
var fuzzLimits = handlers.Limits{
	DefaultTTL:     30 * time.Second,
	MaxTTL:         24 * time.Hour,
	MaxWait:        5 * time.Millisecond,
	MaxBodyBytes:   1024,
	BackendTimeout: 5 * time.Second,
}

// validHeaderValue is what net/http's server lets through to a handler:
// no control bytes but tab, no DEL, no surrounding blanks (it trims them).
func validHeaderValue(v string) bool {
	for _, c := range []byte(v) {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return strings.TrimSpace(v) == v
}

// FuzzAcquireBody drives the acquire handler, behind the request-id and
// no-store middleware the server puts in front of it, with fuzzed body,
// Content-Type, Lock-Token and Prefer, on a fresh memory store whose key is
// free, held by the caller's own token, or held by another (state % 3); with
// state's top bit the body comes without a Content-Length, as a chunked
// body does.
// Invariants: no panic, no 5xx, only the documented statuses, every
// response valid against openapi.yaml, and no token but the caller's own
// in a response.
func FuzzAcquireBody(f *testing.F) {
	tok := "q3kVf1xZ8uQm2Rb7Lw0TnA"
	for _, s := range []struct {
		body, contentType, lockToken, prefer string
		state                                uint8
	}{
		{"", "", "", "", 0},
		{"{}", "application/json", "", "", 0},
		{`{"ttl_ms":30000,"owner":"worker-7"}`, "application/json", "", "", 0},
		{`{"ttl_ms":30000,"wait_ms":5,"owner":"worker-7"}`, "application/json", tok, "", 2},
		{`{"ttl_ms":1000}`, "application/json; charset=utf-8", tok, "", 1},
		{`{"ttl_ms":1000}`, "application/merge-patch+json", tok, "", 0},
		{"", "", tok, "wait=1", 2},
		{"", "", "", "respond-async, wait=0", 2},
		{"", "", "", "wait=x", 0},
		{"", "", "", "wait=-1", 0},
		{"", "", "", `wait="3";foo=bar`, 2},
		{`{"wait_ms":3}`, "", "", "wait=100", 2},
		// wait·1e9 overflowed to a negative wait before bcd24a0: a 503.
		{"", "", "", "wait=9999999999", 2},
		{"", "", "", "wait=9223372037", 0},
		{"ttl=5", "application/json", "", "", 0},
		{`{"ttl_ms":`, "application/json", "", "", 0},
		{`[1,2]`, "", "", "", 0},
		{`null`, "", "", "", 0},
		{`{"ttl":5000}`, "", "", "", 0},
		{`{"ttl_ms":5000,"ttl_ms":6000}`, "", "", "", 0},
		{`{"ttl_ms":null}`, "", "", "", 0},
		{`{"ttl_ms":"5000"}`, "", "", "", 0},
		{`{"ttl_ms":1.5}`, "", "", "", 0},
		{`{"ttl_ms":1e3}`, "", "", "", 0},
		{`{"ttl_ms":99999999999999999999}`, "", "", "", 0},
		{`{"ttl_ms":-9223372036854775808}`, "", "", "", 0},
		{`{"owner":7}`, "", "", "", 0},
		{`{"owner":{"a":[1,{"b":null}]}}`, "", "", "", 0},
		{`{"ttl_ms":5000} {}`, "", "", "", 0},
		{`{"ttl_ms":5000}x`, "", "", "", 0},
		{`{"ttl_ms":0}`, "", "", "", 0},
		{`{"ttl_ms":9,"wait_ms":-1,"owner":"` + strings.Repeat("o", 129) + `"}`, "", "", "", 0},
		{`{"owner":"a\u0007b"}`, "", "", "", 0},
		{`{"owner":"\ud800"}`, "", "", "", 0},
		{"{\"owner\":\"\xff\"}", "", "", "", 0},
		{`{"owner":"` + strings.Repeat("é", 128) + `"}`, "", "", "", 0},
		{`{"owner":"` + strings.Repeat("o", 2000) + `"}`, "", "", "", 0},
		{`{"ttl_ms":5000}`, "text/plain", "", "", 0},
		{`ttl_ms=5000`, "application/x-www-form-urlencoded", "", "", 0},
		{`{}`, "application/json; charset", "", "", 0},
		{"", "", "short", "", 0},
		{"", "", strings.Repeat("a", 22) + "!", "", 0},
		{"", "", holderToken, "", 2},
		{" \t\r\n", "text/plain", "", "", 0},
		{`{"owner":"` + strings.Repeat("o", 2000) + `"}`, "", "", "", 0x80},
		{`{"ttl_ms":1000}`, "application/json", tok, "", 0x80 | 1},
	} {
		f.Add([]byte(s.body), s.contentType, s.lockToken, s.prefer, s.state)
	}

	f.Fuzz(func(t *testing.T, body []byte, contentType, lockToken, prefer string, state uint8) {
		for _, v := range []string{contentType, lockToken, prefer} {
			if !validHeaderValue(v) {
				return // net/http refuses the request before any handler
			}
		}
		const key = "fuzz/acquire"
		ctx := context.Background()
		store := memory.New()
		switch state % 3 {
		case 1: // the caller's token holds the key: a retried acquire
			if handlers.CheckToken(lockToken) == nil {
				_, err := store.Acquire(ctx, key, lockstore.AcquireRequest{Token: lockToken, TTL: time.Minute, Owner: "first"})
				require.NoError(t, err)
			}
		case 2: // someone else holds it
			_, err := store.Acquire(ctx, key, lockstore.AcquireRequest{Token: holderToken, TTL: time.Minute})
			require.NoError(t, err)
		}
		acquire := handlers.NewLocks(store, fuzzLimits, zerolog.Nop(), nil, nil).Acquire()
		h := middleware.RequestID(middleware.NoStore(acquire))

		req := httptest.NewRequest(http.MethodPut, "http://gateway.test/locks/"+key, bytes.NewReader(body))
		if state&0x80 != 0 {
			req.ContentLength = -1
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		for name, v := range map[string]string{"Content-Type": contentType, "Lock-Token": lockToken, "Prefer": prefer} {
			if v != "" {
				req.Header.Set(name, v)
			}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		resp := &apitest.Response{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}

		require.Truef(t, slices.Contains(acquireStatuses, resp.Status), "status %d is not documented for PUT; body: %s", resp.Status, resp.Body)
		apitest.CheckResponse(t, req, resp)
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))

		everything := string(resp.Body) + headerText(resp.Header)
		if lockToken != holderToken {
			require.NotContains(t, everything, holderToken, "another holder's token is never shown")
		}
		if resp.Status >= 300 {
			resp.Problem(t) // the fields every problem has
			if len(lockToken) >= handlers.MinTokenLen {
				require.NotContains(t, everything, lockToken, "a refused request's token is never echoed")
			}
			require.Empty(t, resp.Header.Get("ETag"))
			require.Empty(t, resp.Header.Get("Location"))
			if resp.Status == http.StatusConflict {
				ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
				require.NoError(t, err)
				require.GreaterOrEqual(t, ra, 1)
			}
			return
		}
		lease := resp.JSON(t)
		got, _ := lease["token"].(string)
		require.Equal(t, `"`+got+`"`, resp.Header.Get("ETag"))
		if lockToken != "" {
			require.Equal(t, lockToken, got, "the chosen token is the lease's")
		}
		require.Equal(t, key, lease["key"])
		if resp.Status == http.StatusOK {
			held := state%3 == 1 || state%3 == 2 && lockToken == holderToken
			require.True(t, held, "only a token that holds the key is a 200")
			if state%3 == 1 {
				require.Equal(t, "first", lease["owner"], "a retried acquire keeps the first owner")
			}
		} else {
			require.Equal(t, "/locks/"+key, resp.Header.Get("Location"))
		}
	})
}

func headerText(h http.Header) string {
	var b strings.Builder
	for name, vs := range h {
		b.WriteString(name + ": " + strings.Join(vs, ", ") + "\n")
	}
	return b.String()
}
