package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
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
	body := buf.Bytes()
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
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
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return tooLarge(maxBytes)
		}
		return newError(KindMalformed, "the request body could not be read")
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	// The exact common value skips the media-type parser.
	if ct := r.Header.Get("Content-Type"); ct != "" && ct != "application/json" && !isJSON(ct) {
		return newError(KindUnsupportedMedia, fmt.Sprintf("the body must be application/json, not %q", ct))
	}
	if err := checkStructure(body); err != nil {
		return newError(KindMalformed, err.Error())
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return newError(KindMalformed, jsonProblem(err))
	}
	return nil
}

func tooLarge(maxBytes int64) *Error {
	return newError(KindBodyTooLarge, fmt.Sprintf("the request body is over the %d-byte limit", maxBytes))
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// checkStructure finds what encoding/json accepts silently: a value other
// than an object, a field named twice (json keeps the last), a null (json
// leaves the field unset, as if absent), and data after the object.
func checkStructure(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return errors.New(jsonProblem(err))
	}
	if tok != json.Delim('{') {
		return errors.New("the body must be a JSON object")
	}
	if err := checkObject(dec); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the JSON object")
	}
	return nil
}

// checkObject walks one object whose '{' was just read.
func checkObject(dec *json.Decoder) error {
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return errors.New(jsonProblem(err))
		}
		name := tok.(string) // object keys are always strings
		if seen[name] {
			return fmt.Errorf("field %q appears more than once", name)
		}
		seen[name] = true
		if err := checkValue(dec, name); err != nil {
			return err
		}
	}
	_, err := dec.Token() // '}'
	if err != nil {
		return errors.New(jsonProblem(err))
	}
	return nil
}

func checkValue(dec *json.Decoder, name string) error {
	tok, err := dec.Token()
	if err != nil {
		return errors.New(jsonProblem(err))
	}
	switch tok {
	case nil:
		return fmt.Errorf("field %q is null; leave it out to use the default", name)
	case json.Delim('{'):
		return checkObject(dec)
	case json.Delim('['):
		for dec.More() {
			if err := checkValue(dec, name); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		if err != nil {
			return errors.New(jsonProblem(err))
		}
	}
	return nil
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
		return fmt.Sprintf("field %q must be %s, not a JSON %s", e.Field, typeName(e.Type.Kind().String()), e.Value)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "the body ends before the JSON object does"
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return "unknown field " + f
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
