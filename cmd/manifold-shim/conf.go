package main

import (
	"strconv"
	"unicode/utf8"
)

// The shim reads two string keys at the top level of the network config. It
// does so with this small scanner rather than encoding/json, whose package
// weight costs every call about a millisecond of start-up. A config that does
// not scan is passed on as it is, and manifold, which parses it fully, owns the
// error. FuzzTopLevelStrings holds the scanner to encoding/json.

// topLevelStrings returns the string values of the wanted keys in the JSON
// object data (the last one wins, as in encoding/json). ok is false when data
// is not a well-formed JSON object.
func topLevelStrings(data []byte, wanted ...string) (vals map[string]string, ok bool) {
	s := &scanner{data: data}
	vals = map[string]string{}
	s.space()
	if !s.take('{') {
		return nil, false
	}
	s.space()
	if s.take('}') {
		return vals, s.end()
	}
	for {
		s.space()
		key, ok := s.str()
		if !ok {
			return nil, false
		}
		s.space()
		if !s.take(':') {
			return nil, false
		}
		s.space()
		if s.peek() == '"' {
			v, ok := s.str()
			if !ok {
				return nil, false
			}
			for _, w := range wanted {
				if key == w {
					vals[key] = v
				}
			}
		} else if !s.value(0) {
			return nil, false
		} else {
			for _, w := range wanted {
				if key == w {
					delete(vals, key) // not a string: as if absent
				}
			}
		}
		s.space()
		if s.take('}') {
			return vals, s.end()
		}
		if !s.take(',') {
			return nil, false
		}
	}
}

// maxDepth bounds nesting, as encoding/json does (10000).
const maxDepth = 10000

type scanner struct {
	data []byte
	i    int
}

func (s *scanner) peek() byte {
	if s.i < len(s.data) {
		return s.data[s.i]
	}
	return 0
}

func (s *scanner) take(c byte) bool {
	if s.peek() == c && s.i < len(s.data) {
		s.i++
		return true
	}
	return false
}

func (s *scanner) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) end() bool {
	s.space()
	return s.i == len(s.data)
}

// str reads a string and returns it unescaped.
func (s *scanner) str() (string, bool) {
	if !s.take('"') {
		return "", false
	}
	start := s.i
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '"':
			raw := s.data[start:s.i]
			s.i++
			return unescape(raw)
		case c == '\\':
			s.i += 2
		case c < 0x20:
			return "", false
		default:
			s.i++
		}
	}
	return "", false
}

// unescape decodes a JSON string's contents. As in encoding/json, a byte that
// is not UTF-8 and a lone surrogate become U+FFFD.
func unescape(raw []byte) (string, bool) {
	var out []rune
	for i := 0; i < len(raw); {
		r, size := utf8.DecodeRune(raw[i:])
		if r != '\\' {
			out = append(out, r)
			i += size
			continue
		}
		if i+1 >= len(raw) {
			return "", false
		}
		switch e := raw[i+1]; e {
		case '"', '\\', '/':
			out = append(out, rune(e))
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			if i+6 > len(raw) {
				return "", false
			}
			n, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 32)
			if err != nil {
				return "", false
			}
			r := rune(n)
			if r >= 0xD800 && r < 0xDC00 && i+12 <= len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
				if lo, err := strconv.ParseUint(string(raw[i+8:i+12]), 16, 32); err == nil && lo >= 0xDC00 && lo < 0xE000 {
					out = append(out, (r-0xD800)<<10+(rune(lo)-0xDC00)+0x10000)
					i += 12
					continue
				}
			}
			if r >= 0xD800 && r < 0xE000 {
				r = utf8.RuneError
			}
			out = append(out, r)
			i += 6
			continue
		default:
			return "", false
		}
		i += 2
	}
	return string(out), true
}

// value skips one JSON value that is not a string at depth.
func (s *scanner) value(depth int) bool {
	if depth > maxDepth {
		return false
	}
	switch c := s.peek(); {
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '{':
		s.i++
		s.space()
		if s.take('}') {
			return true
		}
		for {
			s.space()
			if _, ok := s.str(); !ok {
				return false
			}
			s.space()
			if !s.take(':') {
				return false
			}
			s.space()
			if !s.value(depth + 1) {
				return false
			}
			s.space()
			if s.take('}') {
				return true
			}
			if !s.take(',') {
				return false
			}
		}
	case c == '[':
		s.i++
		s.space()
		if s.take(']') {
			return true
		}
		for {
			s.space()
			if !s.value(depth + 1) {
				return false
			}
			s.space()
			if s.take(']') {
				return true
			}
			if !s.take(',') {
				return false
			}
		}
	case c == 't':
		return s.word("true")
	case c == 'f':
		return s.word("false")
	case c == 'n':
		return s.word("null")
	default:
		return s.number()
	}
}

func (s *scanner) word(w string) bool {
	if len(s.data)-s.i >= len(w) && string(s.data[s.i:s.i+len(w)]) == w {
		s.i += len(w)
		return true
	}
	return false
}

// number skips a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	s.take('-')
	switch {
	case s.take('0'):
	case s.peek() >= '1' && s.peek() <= '9':
		s.digits()
	default:
		return false
	}
	if s.take('.') && !s.digits() {
		return false
	}
	if s.take('e') || s.take('E') {
		if !s.take('+') {
			s.take('-')
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.data) && s.data[s.i] >= '0' && s.data[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}
