package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onceq/onceq"
)

// taskSpec is a task as onceq produce takes it, from flags or from a JSON
// line: times and durations are still text, so that both report bad values
// the same way.
type taskSpec struct {
	queue, id, key string
	payload        []byte
	delay, at, ttl string
	timeout        string
	maxAttempts    int
	headers        []onceq.Header
}

// task checks the spec and builds the task at now. field names a field in
// errors: "--delay" for a flag, "delay" in a JSON line.
func (s *taskSpec) task(now time.Time, field func(string) string) (onceq.Task, error) {
	t := onceq.Task{Queue: s.queue, ID: s.id, Payload: s.payload, Headers: s.headers, MaxAttempts: s.maxAttempts}
	if s.key != "" {
		t.Key = []byte(s.key)
	}
	var err error
	if t.Delay, err = parseDuration(field("delay"), s.delay); err != nil {
		return t, err
	}
	if s.at != "" {
		if s.delay != "" {
			return t, usagef("%s and %s: give one: a delay from now or a due time", field("delay"), field("at"))
		}
		if t.Due, err = time.Parse(time.RFC3339Nano, s.at); err != nil {
			return t, usagef("%s %q: want an RFC 3339 time such as 2030-01-02T15:04:05Z or 2030-01-02T15:04:05+01:00", field("at"), s.at)
		}
	}
	ttl, err := parseDuration(field("ttl"), s.ttl)
	if err != nil {
		return t, err
	}
	if ttl < 0 {
		return t, usagef("%s %s: want a positive duration: the task is not run later than this after submission", field("ttl"), s.ttl)
	}
	if ttl > 0 {
		t.Expires = now.Add(ttl)
	}
	if t.Timeout, err = parseDuration(field("timeout"), s.timeout); err != nil {
		return t, err
	}
	if s.maxAttempts < 0 {
		return t, usagef("%s %d: want 0 (the worker's default) or more", field("max_attempts"), s.maxAttempts)
	}
	if err := t.Validate(0); err != nil {
		return t, err
	}
	return t, nil
}

// parseDuration reads a Go duration; empty is zero.
func parseDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, usagef("%s %q: want a duration such as 500ms, 90s or 1h30m", field, s)
	}
	return d, nil
}

// parseHeader reads key=value.
func parseHeader(s string) (onceq.Header, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return onceq.Header{}, usagef("--header %q: want key=value, for example --header trace=abc123", s)
	}
	return onceq.Header{Key: k, Value: []byte(v)}, nil
}

// taskLine is one line of a JSON lines file.
type taskLine struct {
	Queue         string            `json:"queue"`
	ID            string            `json:"id"`
	Key           string            `json:"key"`
	Payload       json.RawMessage   `json:"payload"`
	PayloadBase64 *string           `json:"payload_base64"`
	Delay         string            `json:"delay"`
	At            string            `json:"at"`
	TTL           string            `json:"ttl"`
	MaxAttempts   int               `json:"max_attempts"`
	Timeout       string            `json:"timeout"`
	Headers       map[string]string `json:"headers"`
}

const lineFields = "queue, id, key, payload or payload_base64, delay, at, ttl, max_attempts, timeout and headers"

// decodeLine decodes one JSON line into a task at now; queue is the queue
// of lines that name none. A payload that is a JSON string is its text;
// any other JSON value (an object, say) is the payload as compact JSON.
func decodeLine(line []byte, queue string, now time.Time) (onceq.Task, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var l taskLine
	if err := dec.Decode(&l); err != nil {
		return onceq.Task{}, jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return onceq.Task{}, usagef("more than one JSON value on the line: put each task on its own line")
	}
	s := taskSpec{queue: l.Queue, id: l.ID, key: l.Key, delay: l.Delay, at: l.At, ttl: l.TTL, timeout: l.Timeout, maxAttempts: l.MaxAttempts}
	if s.queue == "" {
		s.queue = queue
	}
	if s.queue == "" {
		return onceq.Task{}, usagef("queue: missing: give \"queue\" on the line or --queue for the whole file")
	}
	var err error
	if s.payload, err = linePayload(l); err != nil {
		return onceq.Task{}, err
	}
	keys := make([]string, 0, len(l.Headers))
	for k := range l.Headers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		s.headers = append(s.headers, onceq.Header{Key: k, Value: []byte(l.Headers[k])})
	}
	return s.task(now, func(f string) string { return f })
}

func linePayload(l taskLine) ([]byte, error) {
	hasPayload := len(l.Payload) > 0 && string(l.Payload) != "null"
	if l.PayloadBase64 != nil {
		if hasPayload {
			return nil, usagef("payload and payload_base64: give one")
		}
		b, err := base64.StdEncoding.DecodeString(*l.PayloadBase64)
		if err != nil {
			return nil, usagef("payload_base64: not standard base64 (%v): encode with base64 -w0", err)
		}
		return b, nil
	}
	if !hasPayload {
		return nil, nil
	}
	var s string
	if json.Unmarshal(l.Payload, &s) == nil {
		return []byte(s), nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, l.Payload); err != nil {
		return nil, usagef("payload: %v", err)
	}
	return buf.Bytes(), nil
}

// jsonError explains a decoding error in the terms of the line format.
func jsonError(err error) error {
	var (
		te *json.UnmarshalTypeError
		se *json.SyntaxError
	)
	switch {
	case errors.As(err, &te):
		want := "a string"
		switch {
		case te.Field == "":
			return usagef("got a JSON %s, want an object such as {\"queue\":\"emails\",\"payload\":\"hi\"}", te.Value)
		case te.Field == "max_attempts":
			want = "a whole number"
		case te.Field == "headers":
			want = "an object of string values, such as {\"trace\":\"abc\"}"
		}
		return usagef("%s: got a JSON %s, want %s", te.Field, te.Value, want)
	case errors.As(err, &se):
		return usagef("not valid JSON at byte %d: %v", se.Offset, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return usagef("incomplete JSON: each line holds one whole object")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return usagef("unknown field %s: the fields are %s", strings.TrimPrefix(err.Error(), "json: unknown field "), lineFields)
	}
	return usagef("%v", err)
}

// lineError is a bad line: its number and what is wrong with it. It
// unwraps to the cause, so that exit codes follow it.
type lineError struct {
	n   int
	err error
}

func (e *lineError) Error() string {
	return "line " + strconv.Itoa(e.n) + ": " + strings.TrimPrefix(e.err.Error(), "onceq: ")
}

func (e *lineError) Unwrap() error { return e.err }

// atLine attributes err to an input line; line 0 is a task from flags.
func atLine(line int, err error) error {
	if line == 0 {
		return err
	}
	return &lineError{line, err}
}

// errLineTooLong is a line longer than maxLine.
var errLineTooLong = fmt.Errorf("longer than %d MiB: a task must fit in a Kafka record", maxLine>>20)

// maxLine bounds a JSON line: a 1 MiB record base64-encoded, with room
// for escapes.
const maxLine = 8 << 20
