package handlers

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"unicode/utf8"
)

// acquireRequest mirrors the body Acquire declares.
type acquireRequest struct {
	TTLms  *int64  `json:"ttl_ms"`
	WaitMs *int64  `json:"wait_ms"`
	Owner  *string `json:"owner"`
}

// BenchmarkDecode decodes a typical acquire body, as a request carries it.
func BenchmarkDecode(b *testing.B) {
	body := []byte(`{"ttl_ms":30000,"owner":"worker-7"}`)
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPut, "/locks/k", nil)
	r.Header.Set("Content-Type", "application/json")
	r.ContentLength = int64(len(body))
	rd := bytes.NewReader(body)
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(body)
		r.Body = io.NopCloser(rd)
		var req acquireRequest
		if err := decode(w, r, 64<<10, &req); err != nil || *req.TTLms != 30000 || *req.Owner != "worker-7" {
			b.Fatalf("decode: %v %+v", err, req)
		}
	}
}

// extendRequest mirrors the body Extend declares.
type extendRequest struct {
	TTLms *int64 `json:"ttl_ms"`
}

// FuzzDecodeFlat: whatever body decodeFlat accepts, decodeStrict (the
// strict two passes that word every refusal) accepts too, with the same
// values; whatever it leaves, it leaves untouched. So taking the one-pass
// path first changes no response.
func FuzzDecodeFlat(f *testing.F) {
	for _, body := range []string{
		`{"ttl_ms":30000,"owner":"worker-7"}`, `{"ttl_ms":30000,"wait_ms":5,"owner":"worker-7"}`,
		`{}`, ` { } `, "{\t\"ttl_ms\" :\r\n-0 }\n", `{"wait_ms":0}`, `{"owner":""}`, `{"owner":"café ☃"}`,
		`{"ttl_ms":9223372036854775807}`, `{"ttl_ms":-9223372036854775808}`, `{"ttl_ms":9223372036854775808}`,
		`{"ttl_ms":99999999999999999999999}`, `{"ttl_ms":1.5}`, `{"ttl_ms":1e3}`, `{"ttl_ms":01}`, `{"ttl_ms":-}`,
		`{"ttl_ms":+1}`, `{"ttl_ms":"5000"}`, `{"owner":7}`, `{"owner":"a\u0007b"}`, `{"owner":"a\"b"}`,
		"{\"owner\":\"a\tb\"}", `{"ttl_ms":null}`, `{"ttl_ms":5000,"ttl_ms":6000}`, `{"ttl_ms":100,"TTL_MS":20000}`,
		`{"ttl":5000}`, `{"wait_ms":5}`, `{"ttl_ms":5000} {}`, `{"ttl_ms":5000}x`, `{"ttl_ms":5000,}`, `{,}`,
		`{"ttl_ms":5000`, `{"ttl_ms":`, `[1,2]`, `null`, `"x"`, `{"ttl_ms":[1]}`, `{"ttl_ms":{}}`, `{"owner":true}`,
		"\ufeff{}", "{}\v", `{"ttl_ms":1 2}`, `{"ttl_ms" 1}`, `{"ttl_ms"::1}`, `{"":1}`,
	} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) {
			return // decode refuses it before either path
		}
		check := func(flat, strict any) {
			fields := fieldNames(flat)
			if !decodeFlat(body, fields, flat) {
				if !reflect.ValueOf(flat).Elem().IsZero() {
					t.Fatalf("body %q: decodeFlat declined it but set %+v", body, flat)
				}
				return
			}
			if err := decodeStrict(body, fields, strict); err != nil {
				t.Fatalf("body %q: decodeFlat accepted it, decodeStrict refuses it: %v", body, err)
			}
			if !reflect.DeepEqual(flat, strict) {
				t.Fatalf("body %q: decodeFlat gave %s, decodeStrict %s", body, show(flat), show(strict))
			}
		}
		check(&acquireRequest{}, &acquireRequest{})
		check(&extendRequest{}, &extendRequest{})
	})
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
