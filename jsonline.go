package onceq

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// LineFields names the fields of a JSON line, for messages.
const LineFields = "queue, id, key, payload or payload_base64, delay, at, ttl, max_attempts, priority, timeout and headers"

// lineExample is a line to show in messages.
const lineExample = `{"queue":"emails","payload":"hi"}`

// ParseLine reads one JSON line of tasks into a Spec. A line is one JSON
// object with the fields
//
//	queue, id, key       strings
//	payload              a JSON string is its text; any other JSON value
//	                     is its compact JSON
//	payload_base64       bytes, standard base64 (instead of payload)
//	delay, ttl, timeout  Go durations such as 90s
//	at                   an RFC 3339 time (instead of delay)
//	max_attempts         a whole number
//	priority             a whole number, 0 (the default) to MaxPriority
//	headers              an object of string values
//
// for example
//
//	{"queue":"emails","id":"invoice-7","payload":{"to":"ada@example.com"},"delay":"90s","headers":{"trace":"abc"}}
//
// A null field is an absent one. The line is refused, with an *Error of
// kind ErrInvalidLine (ErrInvalidTask for a max_attempts or priority out
// of range),
// when it is not exactly one JSON object, holds a field not listed above
// (names are matched exactly, case included), names a field or a header
// twice, is not UTF-8 (a byte order mark included), or has a string with
// half a UTF-16 surrogate pair: JSON text is Unicode, and bytes that are
// not go in payload_base64. Nothing is replaced or dropped silently.
//
// Spec.Task checks the values and builds the task.
func ParseLine(line []byte) (Spec, error) {
	fields, err := LineObject(line)
	if err != nil {
		return Spec{}, err
	}
	return SpecOf(fields)
}

// LineObject splits a JSON line into its fields' raw values, with the
// checks of ParseLine: one object of distinct fields, each a field of a
// task line or one of extra (the fields a format built on task lines adds,
// such as a workflow's "chain"), in Unicode text.
func LineObject(line []byte, extra ...string) (map[string]json.RawMessage, error) {
	if err := checkText(line); err != nil {
		return nil, err
	}
	return lineObject(line, extra)
}

// SpecOf reads the spec of a task line from its fields (LineObject's,
// without any extra ones).
func SpecOf(fields map[string]json.RawMessage) (Spec, error) {
	var err error
	var s Spec
	for _, f := range []struct {
		name string
		to   *string
	}{{"queue", &s.Queue}, {"id", &s.ID}, {"key", &s.Key}, {"delay", &s.Delay}, {"at", &s.At}, {"ttl", &s.TTL}, {"timeout", &s.Timeout}} {
		if *f.to, err = lineString(f.name, fields[f.name]); err != nil {
			return Spec{}, err
		}
	}
	if s.MaxAttempts, err = lineCount("max_attempts", fields["max_attempts"], MaxAttemptCount, fmt.Sprintf("zero (the worker's default) or 1 to %d", MaxAttemptCount)); err != nil {
		return Spec{}, err
	}
	if s.Priority, err = lineCount("priority", fields["priority"], MaxPriority, PriorityRange); err != nil {
		return Spec{}, err
	}
	if s.Payload, err = linePayload(fields["payload"], fields["payload_base64"]); err != nil {
		return Spec{}, err
	}
	if s.Headers, err = lineHeaders(fields["headers"]); err != nil {
		return Spec{}, err
	}
	return s, nil
}

func lineErr(field, format string, args ...any) *Error {
	return invalid(ErrInvalidLine, field, "", format, args...)
}

// checkText refuses a line that is not Unicode text: a byte order mark,
// bytes that are not UTF-8, and \u escapes of half a surrogate pair
// (encoding/json would turn each into U+FFFD).
func checkText(line []byte) error {
	if bytes.HasPrefix(line, []byte("\uFEFF")) {
		return lineErr("", "the line starts with a byte order mark (U+FEFF): save the file as UTF-8 without one")
	}
	for i := 0; i < len(line); {
		r, n := utf8.DecodeRune(line[i:])
		if r == utf8.RuneError && n == 1 {
			return lineErr("", "byte %d (0x%02x) is not UTF-8: JSON lines are UTF-8 text; give bytes that are not text as payload_base64", i, line[i])
		}
		i += n
	}
	for i := 0; i < len(line); i++ {
		if line[i] != '\\' || i+1 >= len(line) {
			continue
		}
		if line[i+1] != 'u' {
			i++ // an escape of one character, \\ included
			continue
		}
		hi, ok := hex4(line, i+2)
		if !ok {
			continue // the JSON decoder reports it
		}
		switch {
		case hi >= 0xD800 && hi < 0xDC00:
			if lo, ok := hex4(line, i+8); ok && line[i+6] == '\\' && line[i+7] == 'u' && lo >= 0xDC00 && lo < 0xE000 {
				i += 11
				continue
			}
			fallthrough
		case hi >= 0xDC00 && hi < 0xE000:
			return lineErr("", "byte %d: %s is half a UTF-16 surrogate pair, which is not text: give bytes that are not text as payload_base64", i, line[i:i+6])
		}
		i += 5
	}
	return nil
}

// hex4 reads four hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[i:i+4]), 16, 32)
	return rune(n), err == nil
}

// lineFieldNames are the fields a line may have.
var lineFieldNames = []string{"queue", "id", "key", "payload", "payload_base64", "delay", "at", "ttl", "max_attempts", "priority", "timeout", "headers"}

// lineObject splits a line into its fields' raw values, refusing anything
// but one object of known, distinct fields.
func lineObject(line []byte, extra []string) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	tok, err := dec.Token()
	if err != nil {
		return nil, jsonErr("", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, lineErr("", "got %s, want an object such as %s", describeToken(tok), lineExample)
	}
	fields := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonErr("", err)
		}
		key := tok.(string) // object keys are strings
		if !slices.Contains(lineFieldNames, key) && !slices.Contains(extra, key) {
			known := LineFields
			if len(extra) > 0 {
				known = strings.Join(lineFieldNames, ", ") + ", " + strings.Join(extra, ", ")
			}
			return nil, lineErr("", "unknown field %q: the fields are %s (lower case)", key, known)
		}
		if _, dup := fields[key]; dup {
			return nil, lineErr(key, "the field appears twice: give it once")
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, jsonErr(key, err)
		}
		fields[key] = raw
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, jsonErr("", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, jsonErr("", err)
		}
		return nil, lineErr("", "more than one JSON value on the line: put each task on its own line")
	}
	return fields, nil
}

// describeToken names a JSON value by its first token.
func describeToken(tok json.Token) string {
	switch v := tok.(type) {
	case nil:
		return "null"
	case json.Delim:
		if v == '[' {
			return "a JSON array"
		}
	case string:
		return "a JSON string"
	case bool:
		return "a JSON boolean"
	case float64, json.Number:
		return "a JSON number"
	}
	return "a JSON value"
}

// describe names the JSON type of a raw value.
func describe(raw json.RawMessage) string {
	switch raw[0] {
	case '"':
		return "a JSON string"
	case '{':
		return "a JSON object"
	case '[':
		return "a JSON array"
	case 't', 'f':
		return "a JSON boolean"
	case 'n':
		return "null"
	}
	return "a JSON number"
}

// jsonErr explains a decoding error in the terms of the line format.
func jsonErr(field string, err error) error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return lineErr(field, "not valid JSON at byte %d: %v", se.Offset, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return lineErr(field, "incomplete JSON: each line holds one whole object")
	}
	return lineErr(field, "%v", err)
}

func isNull(raw json.RawMessage) bool { return raw == nil || string(raw) == "null" }

func lineString(field string, raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", lineErr(field, "got %s, want a string", describe(raw))
	}
	return s, nil
}

// lineCount reads a whole number from 0 to most; want says which, for
// the error of one out of range.
func lineCount(field string, raw json.RawMessage, most int64, want string) (int, error) {
	if isNull(raw) {
		return 0, nil
	}
	if describe(raw) != "a JSON number" {
		return 0, lineErr(field, "got %s, want a whole number", describe(raw))
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	var ne *strconv.NumError
	switch {
	case errors.As(err, &ne) && ne.Err == strconv.ErrRange, err == nil && (n < 0 || n > most):
		return 0, invalid(ErrInvalidTask, field, string(raw), "want %s", want)
	case err != nil:
		return 0, lineErr(field, "got the number %s, want a whole number such as 3", raw)
	}
	return int(n), nil
}

func linePayload(payload, b64 json.RawMessage) ([]byte, error) {
	if !isNull(b64) {
		if !isNull(payload) {
			return nil, lineErr("payload", "payload and payload_base64: give one")
		}
		s, err := lineString("payload_base64", b64)
		if err != nil {
			return nil, err
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, lineErr("payload_base64", "not standard base64 (%v): encode with base64 -w0", err)
		}
		return b, nil
	}
	if isNull(payload) {
		return nil, nil
	}
	if payload[0] == '"' {
		s, err := lineString("payload", payload)
		return []byte(s), err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, payload); err != nil {
		return nil, jsonErr("payload", err)
	}
	return buf.Bytes(), nil
}

// lineHeaders reads the headers object, in key order.
func lineHeaders(raw json.RawMessage) ([]Header, error) {
	if isNull(raw) {
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, lineErr("headers", "got %s, want an object of string values, such as {\"trace\":\"abc\"}", describe(raw))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return nil, jsonErr("headers", err)
	}
	var hs []Header
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonErr("headers", err)
		}
		key := tok.(string)
		if seen[key] {
			return nil, lineErr("headers", "header %q appears twice: give it once", key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, jsonErr("headers", err)
		}
		s, err := lineString("headers", v)
		if err != nil || isNull(v) {
			return nil, lineErr("headers", "header %q: got %s, want a string", key, describe(v))
		}
		hs = append(hs, Header{Key: key, Value: []byte(s)})
	}
	slices.SortFunc(hs, func(a, b Header) int { return cmp.Compare(a.Key, b.Key) })
	return hs, nil
}
