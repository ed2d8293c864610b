package protocol

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// encoding/json decodes by reflection, and the first decode of a type in
// a process pays for walking it: 0.1-0.2 ms of every CNI command, whose
// process decodes one configuration and exits. Decode takes a faster path
// for what configurations usually hold: it scans the top-level object
// itself and sets string, number and boolean keys directly; only nested
// values (dns, ranges, delegate, prevResult...) go to encoding/json, one
// value at a time. Whatever the scan is unsure of — invalid JSON, a value
// of an unexpected type, an escaped or non-ASCII string, a key that only
// matches case-insensitively, a repeated key — hands the whole document to
// encoding/json, so the outcome, errors included, is always encoding/json's.

// Field is a top-level key of a configuration type C and how Decode's
// fast path sets it; Set reports false to leave the whole document to
// encoding/json.
type Field[C any] struct {
	Key string
	Set func(c *C, raw []byte) bool
}

// maxFields is how many keys the fast path tracks (a bit each).
const maxFields = 64

// Decode decodes data into c exactly as json.Unmarshal does. fields must
// name every key encoding/json would set in a C (the fast path leaves a
// key it does not know alone, and encoding/json would not), and the
// setters must set what encoding/json would.
func Decode[C any](data []byte, c *C, fields []Field[C]) error {
	if len(fields) <= maxFields && fastDecode(data, c, fields) {
		return nil
	}
	var zero C
	*c = zero
	return json.Unmarshal(data, c)
}

// fastDecode is Decode's fast path; false leaves c half set.
func fastDecode[C any](data []byte, c *C, fields []Field[C]) bool {
	var seen uint64
	s := &jsonScanner{b: data}
	return s.object(func(key, val []byte) bool {
		if !plainASCII(key) {
			return false // encoding/json unescapes and case-folds keys
		}
		i := fieldIndex(fields, string(key))
		switch {
		case i < 0:
			return !matchesFieldFolded(fields, string(key)) // encoding/json would take it
		case seen&(1<<i) != 0:
			return false
		}
		seen |= 1 << i
		return fields[i].Set(c, val)
	}) && s.end()
}

func fieldIndex[C any](fields []Field[C], key string) int {
	for i, f := range fields {
		if f.Key == key {
			return i
		}
	}
	return -1
}

func matchesFieldFolded[C any](fields []Field[C], key string) bool {
	for _, f := range fields {
		if strings.EqualFold(f.Key, key) {
			return true
		}
	}
	return false
}

// StringField sets a string key.
func StringField[C any](key string, field func(*C) *string) Field[C] {
	return Field[C]{key, func(c *C, raw []byte) bool {
		s, ok := plainString(raw)
		if ok {
			*field(c) = s
		}
		return ok
	}}
}

// IntField sets an integer key.
func IntField[C any](key string, field func(*C) *int) Field[C] {
	return Field[C]{key, func(c *C, raw []byte) bool {
		for i, ch := range raw {
			if (ch < '0' || ch > '9') && !(i == 0 && ch == '-') {
				return false // fractions and exponents: encoding/json decides
			}
		}
		n, err := strconv.Atoi(string(raw))
		if err == nil {
			*field(c) = n
		}
		return err == nil
	}}
}

// BoolField sets a boolean key.
func BoolField[C any](key string, field func(*C) *bool) Field[C] {
	return Field[C]{key, func(c *C, raw []byte) bool {
		b, ok := plainBool(raw)
		if ok {
			*field(c) = b
		}
		return ok
	}}
}

// OptionalBoolField sets a boolean key whose absence means something (a
// *bool).
func OptionalBoolField[C any](key string, field func(*C) **bool) Field[C] {
	return Field[C]{key, func(c *C, raw []byte) bool {
		b, ok := plainBool(raw)
		if ok {
			*field(c) = &b
		}
		return ok
	}}
}

// NestedField hands a key's value to encoding/json (field returns a
// pointer to decode into).
func NestedField[C any](key string, field func(*C) any) Field[C] {
	return Field[C]{key, func(c *C, raw []byte) bool {
		return json.Unmarshal(raw, field(c)) == nil
	}}
}

func plainBool(raw []byte) (bool, bool) {
	switch string(raw) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// plainString decodes a JSON string without escapes and of ASCII only,
// the only kind whose decoding is just dropping the quotes.
func plainString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	body := raw[1 : len(raw)-1]
	if !plainASCII(body) {
		return "", false
	}
	return string(body), true
}

func plainASCII(b []byte) bool {
	for _, ch := range b {
		if ch == '\\' || ch >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// jsonScanner checks JSON syntax and cuts out raw values. Anything it
// does not accept is left to encoding/json.
type jsonScanner struct {
	b []byte
	i int
}

func (s *jsonScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *jsonScanner) peek() byte {
	s.space()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// end reports whether only white space is left.
func (s *jsonScanner) end() bool { return s.peek() == 0 && s.i == len(s.b) }

// object scans an object, calling member with each key (raw, without
// quotes) and value (raw); it stops at the first false.
func (s *jsonScanner) object(member func(key, val []byte) bool) bool {
	if s.peek() != '{' {
		return false
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		return true
	}
	for {
		key, ok := s.str()
		if !ok || s.peek() != ':' {
			return false
		}
		s.i++
		val, ok := s.value()
		if !ok || !member(key[1:len(key)-1], val) {
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

// value scans any value and returns it raw.
func (s *jsonScanner) value() ([]byte, bool) {
	c := s.peek()
	start := s.i
	var ok bool
	switch {
	case c == '{':
		ok = s.object(func(_, _ []byte) bool { return true })
	case c == '[':
		ok = s.array()
	case c == '"':
		return s.str()
	case c == '-' || c >= '0' && c <= '9':
		ok = s.number()
	case c == 't', c == 'f', c == 'n':
		ok = s.literal()
	}
	return s.b[start:s.i], ok
}

func (s *jsonScanner) array() bool {
	s.i++ // '['
	if s.peek() == ']' {
		s.i++
		return true
	}
	for {
		if _, ok := s.value(); !ok {
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

// str scans a string and returns it raw, quotes included. Escapes are
// checked for form only; control characters are refused, as JSON does.
func (s *jsonScanner) str() ([]byte, bool) {
	if s.peek() != '"' {
		return nil, false
	}
	start := s.i
	s.i++
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start:s.i], true
		case c < 0x20:
			return nil, false
		case c == '\\':
			if !s.escape() {
				return nil, false
			}
		default:
			s.i++
		}
	}
	return nil, false
}

// escape scans a backslash escape: \" \\ \/ \b \f \n \r \t or \u and four
// hex digits.
func (s *jsonScanner) escape() bool {
	if s.i+1 >= len(s.b) {
		return false
	}
	c := s.b[s.i+1]
	s.i += 2
	if c != 'u' {
		return strings.IndexByte(`"\/bfnrt`, c) >= 0
	}
	if s.i+4 > len(s.b) {
		return false
	}
	for _, h := range s.b[s.i : s.i+4] {
		if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
			return false
		}
	}
	s.i += 4
	return true
}

// number scans a JSON number (-?int frac? exp?); the integer part has no
// leading zero.
func (s *jsonScanner) number() bool {
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	start := s.i
	if !s.digits() || s.b[start] == '0' && s.i-start > 1 {
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		return s.digits()
	}
	return true
}

func (s *jsonScanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

func (s *jsonScanner) literal() bool {
	for _, lit := range []string{"true", "false", "null"} {
		if bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
			s.i += len(lit)
			return true
		}
	}
	return false
}
