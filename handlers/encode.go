package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/lockgateway/lockgateway/problem"
)

// encode writes v as JSON with status. Headers must be set before: after
// WriteHeader they are gone.
func encode(w http.ResponseWriter, status int, contentType string, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// Details quote "<token>"; this is JSON, not HTML.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Our own response types always marshal.
		panic(fmt.Sprintf("handlers: encode %T: %v", v, err))
	}
	writeBody(w, status, contentType, buf.Bytes())
}

// writeBody sends body, with its Content-Type and Content-Length, and status.
func writeBody(w http.ResponseWriter, status int, contentType string, body []byte) {
	h := w.Header()
	// The two values share one allocation; full-capacity slices, so an
	// append to either copies it rather than overwriting the other.
	v := []string{contentType, strconv.Itoa(len(body))}
	h[hdrContentType], h[hdrContentLength] = v[0:1:1], v[1:2:2]
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// decode reads an optional JSON object body into dst, strictly: a body is
// refused for a non-JSON Content-Type (415), for being over maxBytes (413),
// and for anything but one JSON object of known fields with non-null values
// of the right types, each named once (400). An empty body leaves dst as is,
// so absent means "use the default".
func decode(w http.ResponseWriter, r *http.Request, maxBytes int64, dst any) error {
	if r.ContentLength > maxBytes {
		return tooLarge(maxBytes)
	}
	body, err := readBody(w, r, maxBytes)
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return tooLarge(maxBytes)
		}
		return newError(problem.Malformed, "the request body could not be read to its end (the connection broke or the body is shorter than its Content-Length); send it again")
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	// The exact common value skips the media-type parser.
	if ct := header(r.Header, hdrContentType); ct != "" && ct != "application/json" && !isJSON(ct) {
		return newError(problem.UnsupportedMedia, fmt.Sprintf("the body must be application/json, not %.64q: send Content-Type: application/json", ct))
	}
	if !utf8.Valid(body) {
		// encoding/json would turn each bad byte into U+FFFD and grant
		// a lease to an owner the client never wrote.
		return newError(problem.Malformed, "the body is not valid UTF-8 (RFC 8259 JSON is UTF-8); send the text UTF-8 encoded")
	}
	fields := fieldNames(dst)
	if decodeFlat(body, fields, dst) {
		return nil
	}
	return decodeStrict(body, fields, dst)
}

// readBody reads r's body, at most maxBytes of it. A body of known length
// (0 < r.ContentLength ≤ maxBytes, checked by the caller), which is what
// nearly every acquire sends, is read into one buffer of its size:
// net/http's body reader stops at the Content-Length and reports a body
// cut short as io.ErrUnexpectedEOF, so the MaxBytesReader and io.ReadAll's
// growing buffer (three allocations on every acquire) are only needed for
// a body of unknown length (chunked) or none.
func readBody(w http.ResponseWriter, r *http.Request, maxBytes int64) ([]byte, error) {
	if r.ContentLength <= 0 {
		return io.ReadAll(http.MaxBytesReader(w, r.Body, maxBytes))
	}
	body := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(r.Body, body); err != nil {
		return nil, err
	}
	return body, nil
}

// decodeStrict takes the bodies decodeFlat leaves: it finds what is wrong
// with one and words it, or decodes what only encoding/json reads (a
// string with escapes), at the cost of two passes.
func decodeStrict(body []byte, fields map[string]field, dst any) error {
	if err := checkStructure(body, fields); err != nil {
		return newError(problem.Malformed, err.Error())
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return newError(problem.Malformed, jsonProblem(err))
	}
	return nil
}

func tooLarge(maxBytes int64) *Error {
	return newError(problem.BodyTooLarge, fmt.Sprintf("the request body is over the %d-byte limit", maxBytes))
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// field is one field a body may name: its index in the struct and the
// kind it holds (through the pointer that tells absent from zero).
type field struct {
	index int
	kind  reflect.Kind
}

// fieldNames lists the JSON names of dst's struct fields: the only names a
// body may use, spelled exactly. encoding/json also matches them ignoring
// case, so {"ttl_ms":100,"TTL_MS":20000} would be one field set twice.
func fieldNames(dst any) map[string]field {
	t := reflect.TypeOf(dst)
	if names, ok := fieldNameCache.Load(t); ok {
		return names.(map[string]field)
	}
	names := map[string]field{}
	st := t.Elem()
	for i := range st.NumField() {
		f := st.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		names[name] = field{index: i, kind: ft.Kind()}
	}
	fieldNameCache.Store(t, names)
	return names
}

var fieldNameCache sync.Map // reflect.Type → map[string]field

// checkStructure finds what encoding/json accepts silently: a value other
// than an object, a field name not spelled exactly as documented (json
// matches names ignoring case), a field named twice (json keeps the last), a
// null (json leaves the field unset, as if absent), an integer too large for
// any field, and data after the object.
func checkStructure(body []byte, fields map[string]field) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return errors.New(jsonProblem(err))
	}
	if tok != json.Delim('{') {
		return errors.New("the body must be a JSON object")
	}
	if err := checkObject(dec, fields); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the JSON object")
	}
	return nil
}

// checkObject walks one object whose '{' was just read. fields, when not
// nil, are the names it may have, with their kinds.
func checkObject(dec *json.Decoder, fields map[string]field) error {
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return errors.New(jsonProblem(err))
		}
		name := tok.(string) // object keys are always strings
		f, known := fields[name]
		if fields != nil && !known {
			return unknownField(name, fields)
		}
		if seen[name] {
			return fmt.Errorf("field %s appears more than once", quoteName(name))
		}
		seen[name] = true
		if err := checkValue(dec, name, f.kind); err != nil {
			return err
		}
	}
	_, err := dec.Token() // '}'
	if err != nil {
		return errors.New(jsonProblem(err))
	}
	return nil
}

func checkValue(dec *json.Decoder, name string, kind reflect.Kind) error {
	tok, err := dec.Token()
	if err != nil {
		return errors.New(jsonProblem(err))
	}
	switch tok {
	case nil:
		return fmt.Errorf("field %s is null; leave it out to use the default", quoteName(name))
	case json.Delim('{'):
		return checkObject(dec, nil)
	case json.Delim('['):
		for dec.More() {
			if err := checkValue(dec, name, reflect.Invalid); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		if err != nil {
			return errors.New(jsonProblem(err))
		}
	}
	// Say "too large" rather than json's "must be an integer, not a JSON
	// number" for an integer that does not fit an int64 field.
	if num, ok := tok.(json.Number); ok && kind == reflect.Int64 && isInteger(string(num)) {
		if _, err := num.Int64(); err != nil {
			return fmt.Errorf("field %s is an integer too large in magnitude (beyond ±9223372036854775807); send a value within the documented range", quoteName(name))
		}
	}
	return nil
}

func isInteger(num string) bool { return !strings.ContainsAny(num, ".eE") }

// unknownField words a field name the API does not have, pointing at the
// right spelling when only the case is wrong.
func unknownField(name string, fields map[string]field) error {
	for f := range fields {
		if strings.EqualFold(f, name) {
			return fmt.Errorf("unknown field %s: field names are case-sensitive; did you mean %q?", quoteName(name), f)
		}
	}
	known := slices.Sorted(maps.Keys(fields))
	return fmt.Errorf("unknown field %s; the fields are %s", quoteName(name), strings.Join(known, ", "))
}

// quoteName quotes a field name from the body, cut to 64 bytes: a detail
// echoes nothing unbounded.
func quoteName(name string) string {
	const max = 64
	if len(name) <= max {
		return strconv.Quote(name)
	}
	return strconv.Quote(clip(name, max)) + "…"
}

// clip cuts s to at most max bytes, never inside a character: what an error
// repeats of a client's input stays small however large the input was.
func clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := s[:max]
	for !utf8.ValidString(cut) {
		cut = cut[:len(cut)-1]
	}
	return cut
}

// jsonProblem words a JSON error for the client.
func jsonProblem(err error) string {
	if e, ok := errors.AsType[*json.SyntaxError](err); ok {
		return fmt.Sprintf("the body is not valid JSON (at byte %d)", e.Offset)
	}
	if e, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		if e.Field == "" {
			return "the body must be a JSON object"
		}
		// e.Value is "number 1.5" for a number: name the kind, never echo
		// the value.
		kind, _, _ := strings.Cut(e.Value, " ")
		return fmt.Sprintf("field %s must be %s, not a JSON %s", quoteName(e.Field), typeName(e.Type.Kind().String()), kind)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "the body ends before the JSON object does"
	}
	return "the body is not valid JSON"
}

func typeName(kind string) string {
	switch kind {
	case "int64", "int", "int32":
		return "an integer"
	case "string":
		return "a string"
	}
	return kind
}
