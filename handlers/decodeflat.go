package handlers

import (
	"reflect"
	"strconv"
)

// decodeFlat decodes, in one pass and with no tokenizer, the body nearly
// every client sends: one object of known fields, each named once and
// spelled exactly, holding an integer that fits an int64 or a string with
// no escapes. It reports whether it did. On false dst is untouched and
// decodeStrict (checkStructure, then encoding/json) takes the body:
// decodeFlat refuses nothing itself, so every refusal and its wording stay
// there. What it accepts, decodeStrict accepts with the same values
// (FuzzDecodeFlat holds it to that). body is valid UTF-8.
func decodeFlat(body []byte, fields map[string]field, dst any) bool {
	type value struct {
		f field
		n int64
		s string
	}
	var buf [4]value // room for every request type's fields, on the stack
	vals := buf[:0]
	s := scanner{b: body}
	if !s.skip('{') {
		return false
	}
	for !s.skip('}') {
		if len(vals) > 0 && !s.skip(',') {
			return false
		}
		name, ok := s.str()
		if !ok {
			return false
		}
		f, known := fields[string(name)]
		if !known {
			return false
		}
		for _, v := range vals {
			if v.f.index == f.index {
				return false // named twice
			}
		}
		if !s.skip(':') {
			return false
		}
		v := value{f: f}
		switch f.kind {
		case reflect.Int64:
			v.n, ok = s.int()
		case reflect.String:
			var str []byte
			str, ok = s.str()
			v.s = string(str)
		default:
			ok = false
		}
		if !ok {
			return false
		}
		vals = append(vals, v)
	}
	s.space()
	if s.i != len(s.b) {
		return false // trailing data
	}
	// Set each field as encoding/json does: through its pointer, allocated
	// when nil.
	st := reflect.ValueOf(dst).Elem()
	for _, v := range vals {
		fv := st.Field(v.f.index)
		if fv.Kind() == reflect.Pointer {
			if fv.IsNil() {
				fv.Set(reflect.New(fv.Type().Elem()))
			}
			fv = fv.Elem()
		}
		if v.f.kind == reflect.Int64 {
			fv.SetInt(v.n)
		} else {
			fv.SetString(v.s)
		}
	}
	return true
}

// scanner reads the few JSON forms decodeFlat takes; anything else stops it.
type scanner struct {
	b []byte
	i int
}

// space skips JSON whitespace (RFC 8259: space, tab, LF, CR).
func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// skip skips whitespace, then c if it comes next, and reports whether it did.
func (s *scanner) skip(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string with no escapes and no control bytes, whose bytes
// are then its value (the body being valid UTF-8).
func (s *scanner) str() ([]byte, bool) {
	if !s.skip('"') {
		return nil, false
	}
	for start := s.i; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// int reads an integer that fits an int64, in JSON's syntax (no plus sign,
// no leading zero). A fraction or exponent after it is left unread: the
// caller then finds neither ',' nor '}' and gives up.
func (s *scanner) int() (int64, bool) {
	s.space()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	digits := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	if s.i == digits || s.b[digits] == '0' && s.i-digits > 1 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
	return n, err == nil
}
