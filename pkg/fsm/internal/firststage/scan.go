package firststage

import (
	"encoding/json"
	"unicode/utf8"
)

// This file holds a small strict JSON scanner. The projector decodes every
// Kafka record through it, so it avoids reflection and allocations: it
// validates a value in place and reports its span, and callers convert only
// the spans they need. It accepts exactly RFC 8259 JSON with valid UTF-8 and
// nesting at most maxDepth deep; FuzzDecodeRecord checks it against
// encoding/json.

const maxDepth = 64

type jsonKind uint8

const (
	kindInvalid jsonKind = iota
	kindObject
	kindArray
	kindString
	kindNumber
	kindBool
	kindNull
)

func (k jsonKind) String() string {
	switch k {
	case kindObject:
		return "an object"
	case kindArray:
		return "an array"
	case kindString:
		return "a string"
	case kindNumber:
		return "a number"
	case kindBool:
		return "a boolean"
	case kindNull:
		return "null"
	}
	return "invalid"
}

// syntaxError is a JSON syntax error at a byte offset.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string { return e.msg }

type scanner struct {
	b []byte
	// ws records whether insignificant whitespace was skipped, so callers
	// know when a compacting copy is needed.
	ws bool
}

func (s *scanner) skipWS(i int) int {
	for i < len(s.b) {
		switch s.b[i] {
		case ' ', '\t', '\n', '\r':
			s.ws = true
			i++
		default:
			return i
		}
	}
	return i
}

func (s *scanner) fail(i int, msg string) (int, jsonKind, error) {
	return i, kindInvalid, &syntaxError{off: i, msg: msg}
}

// value validates the JSON value starting at i (no leading whitespace) and
// returns the offset just past it and its kind.
func (s *scanner) value(i, depth int) (int, jsonKind, error) {
	if i >= len(s.b) {
		return s.fail(i, "unexpected end of JSON")
	}
	switch c := s.b[i]; {
	case c == '{':
		if depth >= maxDepth {
			return s.fail(i, "JSON nested too deeply")
		}
		return s.object(i, depth+1, nil)
	case c == '[':
		if depth >= maxDepth {
			return s.fail(i, "JSON nested too deeply")
		}
		i = s.skipWS(i + 1)
		if i < len(s.b) && s.b[i] == ']' {
			return i + 1, kindArray, nil
		}
		for {
			end, _, err := s.value(i, depth+1)
			if err != nil {
				return end, kindInvalid, err
			}
			i = s.skipWS(end)
			if i >= len(s.b) {
				return s.fail(i, "unexpected end of JSON in array")
			}
			if s.b[i] == ']' {
				return i + 1, kindArray, nil
			}
			if s.b[i] != ',' {
				return s.fail(i, "expected ',' or ']' in array")
			}
			i = s.skipWS(i + 1)
		}
	case c == '"':
		end, _, err := s.str(i)
		if err != nil {
			return end, kindInvalid, err
		}
		return end, kindString, nil
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number(i)
	case c == 't':
		return s.literal(i, "true", kindBool)
	case c == 'f':
		return s.literal(i, "false", kindBool)
	case c == 'n':
		return s.literal(i, "null", kindNull)
	}
	return s.fail(i, "invalid character at start of value")
}

func (s *scanner) literal(i int, lit string, k jsonKind) (int, jsonKind, error) {
	if len(s.b)-i < len(lit) || string(s.b[i:i+len(lit)]) != lit {
		return s.fail(i, "invalid literal")
	}
	return i + len(lit), k, nil
}

func (s *scanner) number(i int) (int, jsonKind, error) {
	b := s.b
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return s.fail(i, "invalid number")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return s.fail(i, "invalid number")
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return s.fail(i, "invalid number")
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	return i, kindNumber, nil
}

// str validates the string starting at the quote at i and returns the offset
// past the closing quote and whether it contains escapes.
func (s *scanner) str(i int) (end int, escaped bool, err error) {
	b := s.b
	i++
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			return i + 1, escaped, nil
		case c == '\\':
			escaped = true
			if i+1 >= len(b) {
				return i, false, &syntaxError{i, "unexpected end of JSON in string"}
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return i, false, &syntaxError{i, "invalid \\u escape"}
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return i, false, &syntaxError{i, "invalid \\u escape"}
					}
				}
				i += 6
			default:
				return i, false, &syntaxError{i, "invalid escape in string"}
			}
		case c < 0x20:
			return i, false, &syntaxError{i, "control character in string"}
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size <= 1 {
				return i, false, &syntaxError{i, "invalid UTF-8 in string"}
			}
			i += size
		}
	}
	return i, false, &syntaxError{i, "unexpected end of JSON in string"}
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// member is called for each member of an object with the key span (quotes
// included), whether the key has escapes, and the value span and kind. A
// non-nil error from it stops the scan.
type memberFunc func(key []byte, keyEscaped bool, val []byte, kind jsonKind) error

// object validates the object at i; when fn is not nil it is called for each
// member of this object (not of nested ones).
func (s *scanner) object(i, depth int, fn memberFunc) (int, jsonKind, error) {
	i = s.skipWS(i + 1)
	if i < len(s.b) && s.b[i] == '}' {
		return i + 1, kindObject, nil
	}
	for {
		if i >= len(s.b) || s.b[i] != '"' {
			return s.fail(i, "expected string key in object")
		}
		keyEnd, keyEsc, err := s.str(i)
		if err != nil {
			return keyEnd, kindInvalid, err
		}
		key := s.b[i:keyEnd]
		i = s.skipWS(keyEnd)
		if i >= len(s.b) || s.b[i] != ':' {
			return s.fail(i, "expected ':' after object key")
		}
		i = s.skipWS(i + 1)
		start := i
		end, kind, err := s.value(i, depth)
		if err != nil {
			return end, kindInvalid, err
		}
		if fn != nil {
			if err := fn(key, keyEsc, s.b[start:end], kind); err != nil {
				return end, kindInvalid, err
			}
		}
		i = s.skipWS(end)
		if i >= len(s.b) {
			return s.fail(i, "unexpected end of JSON in object")
		}
		if s.b[i] == '}' {
			return i + 1, kindObject, nil
		}
		if s.b[i] != ',' {
			return s.fail(i, "expected ',' or '}' in object")
		}
		i = s.skipWS(i + 1)
	}
}

// unquote returns the string value of a validated JSON string span. Spans
// without escapes are converted directly; escaped ones go through
// encoding/json, which is correct for every escape and rare on this path.
func unquote(span []byte, escaped bool) string {
	if !escaped {
		return string(span[1 : len(span)-1])
	}
	var out string
	if err := json.Unmarshal(span, &out); err != nil {
		return "" // unreachable: span was validated by the scanner
	}
	return out
}

// keyIs reports whether a key span equals name, without allocating for the
// common unescaped case.
func keyIs(key []byte, escaped bool, name string) bool {
	if !escaped {
		return string(key[1:len(key)-1]) == name
	}
	return unquote(key, true) == name
}

// appendCompact appends the validated JSON value src to dst without
// insignificant whitespace.
func appendCompact(dst, src []byte) []byte {
	inStr, esc := false, false
	for _, c := range src {
		if inStr {
			dst = append(dst, c)
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			inStr = true
		}
		dst = append(dst, c)
	}
	return dst
}

// appendQuoted appends s as a JSON string. Strings that need no escaping are
// copied as they are; others go through encoding/json (HTML-safe escaping is
// harmless here).
func appendQuoted(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
