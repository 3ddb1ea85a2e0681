package onceq

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestParseLine(t *testing.T) {
	s, err := ParseLine([]byte(`{"queue":"emails","id":"i-1","key":"k","payload":{"b": [1, "x"]},"delay":"90s","ttl":"1h",` +
		`"timeout":"30s","max_attempts":3,"priority":9,"headers":{"z":"1","a":"\u00e9\ud83d\ude00"},"at":null}`))
	want := Spec{Queue: "emails", ID: "i-1", Key: "k", Payload: []byte(`{"b":[1,"x"]}`), Delay: "90s", TTL: "1h", Timeout: "30s", MaxAttempts: 3, Priority: 9,
		Headers: []Header{{Key: "a", Value: []byte("é😀")}, {Key: "z", Value: []byte("1")}}}
	if err != nil || !reflect.DeepEqual(s, want) {
		t.Fatalf("got %+v, %v\nwant %+v", s, err, want)
	}
	for line, payload := range map[string]string{
		`{"payload":"a\u00e9\n"}`:                  "aé\n",
		`{"payload":"\ufeffhi"}`:                   "\uFEFFhi", // a BOM inside a string is text
		`{"payload_base64":"/w=="}`:                "\xff",
		`{"payload":null,"payload_base64":"YQ=="}`: "a",
		`{"payload":"\\ud800"}`:                    `\ud800`, // an escaped backslash, not an escape
		`{}`:                                       "",
	} {
		s, err := ParseLine([]byte(line))
		if err != nil || string(s.Payload) != payload {
			t.Errorf("%s: payload %q, %v; want %q", line, s.Payload, err, payload)
		}
	}
}

// TestParseLineRefuses pins the silent acceptance of issue 17's JSON lines:
// a null line, duplicate keys, a byte order mark and invalid UTF-8 (or
// half a surrogate pair) in a payload were accepted, or mangled into
// U+FFFD. Each is refused with an *Error naming what is wrong.
func TestParseLineRefuses(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{`null`, "got null, want an object"},
		{` null `, "got null, want an object"},
		{`[]`, "got a JSON array"},
		{`"x"`, "got a JSON string"},
		{`7`, "got a JSON number"},
		{`{"queue":"a","queue":"b"}`, `queue: invalid JSON line: the field appears twice`},
		{`{"payload":"a","payload":{}}`, `payload: invalid JSON line: the field appears twice`},
		{`{"headers":{"x":"1","x":"2"}}`, `header "x" appears twice`},
		{`{"Queue":"a"}`, `unknown field "Queue"`},
		{`{"queue":"a","QUEUE":"b"}`, `unknown field "QUEUE"`},
		{"\uFEFF{\"queue\":\"a\"}", "byte order mark"},
		{"{\"queue\":\"a\",\"payload\":\"\xff\xfe\"}", "byte 24 (0xff) is not UTF-8"},
		{"{\"key\":\"\xc3\"}", "is not UTF-8"},
		{`{"payload":"\ud800"}`, `\ud800 is half a UTF-16 surrogate pair`},
		{`{"payload":"\udc00x"}`, `\udc00 is half`},
		{`{"payload":"\ud800\u0041"}`, `\ud800 is half`},
		{`{"headers":{"h":"\uDBFF"}}`, `\uDBFF is half`},
		{`{"queue":1}`, "queue: invalid JSON line: got a JSON number, want a string"},
		{`{"max_attempts":"3"}`, "max_attempts: invalid JSON line: got a JSON string, want a whole number"},
		{`{"max_attempts":3.0}`, "got the number 3.0, want a whole number"},
		{`{"max_attempts":1e3}`, "got the number 1e3"},
		{`{"max_attempts":99999999999999999999}`, "want zero (the worker's default) or 1 to 2147483647"},
		{`{"max_attempts":2147483648}`, "want zero (the worker's default) or 1 to 2147483647"},
		{`{"priority":10}`, `priority "10": invalid task: want 0 (the default, the lowest) to 9 (the highest)`},
		{`{"priority":-1}`, "want 0 (the default, the lowest) to 9"},
		{`{"priority":"high"}`, "priority: invalid JSON line: got a JSON string, want a whole number"},
		{`{"headers":{"a":1}}`, `header "a": got a JSON number, want a string`},
		{`{"headers":{"a":null}}`, `header "a": got null, want a string`},
		{`{"headers":[]}`, "headers: invalid JSON line: got a JSON array"},
		{`{"payload":"a","payload_base64":"YQ=="}`, "payload and payload_base64: give one"},
		{`{"payload_base64":"!!"}`, "not standard base64"},
		{`{"queue":"q"} {"queue":"q"}`, "more than one JSON value"},
		{`{"queue":"q"`, "incomplete JSON"},
		{`{"queue":"q",}`, "not valid JSON at byte"},
		{``, "incomplete JSON"},
	} {
		_, err := ParseLine([]byte(tc.line))
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an *Error containing %q", tc.line, err, tc.want)
		}
	}
}

func TestSpecTask(t *testing.T) {
	now := time.Now() // Validate compares a Delay with the clock
	flag := func(f string) string { return "--" + strings.ReplaceAll(f, "_", "-") }
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{Queue: "q", Delay: "soon"}, `--delay "soon": invalid task: want a duration`},
		{Spec{Queue: "q", Delay: "1s", At: "2030-01-01T00:00:00Z"}, "give --delay or --at, not both"},
		{Spec{Queue: "q", At: "1969-07-20T20:17:00Z"}, `--at "1969-07-20T20:17:00Z": invalid task: want a time from 1970-01-01T00:00:00Z`},
		{Spec{Queue: "q", TTL: "-1s"}, `--ttl "-1s": invalid task: want a positive duration`},
		{Spec{Queue: "q", Delay: "2h", TTL: "1h"}, `--ttl "1h": expiry before due time`},
		{Spec{Queue: "q", MaxAttempts: 1 << 31}, `--max-attempts "2147483648": invalid task: want zero (the worker's default) or 1 to 2147483647`},
		{Spec{Queue: "q", Timeout: "500us"}, `--timeout "500µs": invalid task: zero (the worker's default) or at least 1ms`},
		{Spec{Queue: "q", Headers: []Header{{Key: "onceq-id", Value: []byte("x")}}}, `--header "onceq-id": malformed header: the header is onceq's own: set --id instead`},
		{Spec{Queue: "q", Headers: []Header{{Key: "onceq-due", Value: []byte("1")}}}, "set --delay or --at instead"},
		{Spec{Queue: "q", Headers: []Header{{Key: "onceq-attempt", Value: []byte("2")}}}, "onceq writes it; it cannot be set on submission"},
		{Spec{Queue: "q", Headers: []Header{{Key: "onceq-dely", Value: []byte("2")}}}, "not a header of onceq's wire format"},
		{Spec{Queue: "a b"}, `--queue "a b": invalid queue name`},
	} {
		_, err := tc.spec.Task(now, flag)
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an *Error containing %q", tc.spec, err, tc.want)
		}
	}
	task, err := (&Spec{Queue: "q", ID: "a", Key: "k", Payload: []byte("p"), Delay: "90s", TTL: "1h", Timeout: "2s", MaxAttempts: 4}).Task(now, nil)
	if err != nil || task.Delay != 90*time.Second || !task.Expires.Equal(now.Add(time.Hour)) || task.Timeout != 2*time.Second ||
		task.MaxAttempts != 4 || string(task.Key) != "k" {
		t.Fatalf("got %+v, %v", task, err)
	}
}

// specLine writes a spec as a JSON line.
func specLine(s Spec) []byte {
	l := map[string]any{"payload_base64": base64.StdEncoding.EncodeToString(s.Payload)}
	for k, v := range map[string]string{"queue": s.Queue, "id": s.ID, "key": s.Key, "delay": s.Delay, "at": s.At, "ttl": s.TTL, "timeout": s.Timeout} {
		if v != "" {
			l[k] = v
		}
	}
	if s.MaxAttempts != 0 {
		l["max_attempts"] = s.MaxAttempts
	}
	if len(s.Headers) > 0 {
		hs := map[string]string{}
		for _, h := range s.Headers {
			hs[h.Key] = string(h.Value)
		}
		l["headers"] = hs
	}
	b, _ := json.Marshal(l)
	return b
}

// FuzzParseLine: parsing never panics; a refused line is an *Error; a line
// that is not UTF-8 is always refused; an accepted line's strings are
// exact (no U+FFFD that was not in the line), and the spec written back
// as a line parses to the same spec.
func FuzzParseLine(f *testing.F) {
	for _, l := range []string{
		`{"queue":"emails","id":"a","payload":"text"}`,
		`{"id":"b","payload":{"n": 1},"delay":"2m","headers":{"z":"1","a":"2"}}`,
		`{"id":"c","payload_base64":"AAEC","key":"k","max_attempts":2,"timeout":"1s","ttl":"1h"}`,
		`{"queue":"q","at":"2030-01-01T00:00:00.123456789+05:30","ttl":"100000h"}`,
		`{"queue":"q","payload":null,"payload_base64":""}`,
		`{"queue":"q","payload":[1,"a",{"b":null}],"headers":{}}`,
		`{"queue":"q","key":"\u00e9\ud800"}`, `{"queue":"q","key":"\ud83d\ude00"}`, `{"payload":"\\ud800"}`,
		`{"queue":"q","queue":"r"}`, `{"headers":{"a":"1","a":"1"}}`, `{"Queue":"q"}`,
		"\uFEFF{}", "{\"payload\":\"\xff\"}", `{"payload":"\ufffd"}`,
		`{"queue":"q","dely":"1s"}`, `{"queue":1}`, `[]`, `null`, `{"queue":"q"} x`, ``,
		`{"max_attempts":2147483648}`, `{"max_attempts":-0}`,
	} {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		s, err := ParseLine(line)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is %T, want an *Error", err, err)
			}
			return
		}
		if !utf8.Valid(line) || bytes.HasPrefix(line, []byte("\uFEFF")) {
			t.Fatalf("accepted a line that is not UTF-8 text without a BOM: %q", line)
		}
		for _, v := range []string{s.Queue, s.ID, s.Key, s.Delay, s.At, s.TTL, s.Timeout} {
			if strings.ContainsRune(v, utf8.RuneError) && !bytes.Contains(line, []byte("\uFFFD")) && !bytes.Contains(bytes.ToLower(line), []byte(`\ufffd`)) {
				t.Fatalf("U+FFFD in %q from a line without one: %q", v, line)
			}
		}
		again, err := ParseLine(specLine(s))
		if err != nil {
			t.Fatalf("re-written line %s: %v", specLine(s), err)
		}
		if len(s.Payload) == 0 {
			s.Payload = nil
		}
		if len(again.Payload) == 0 {
			again.Payload = nil
		}
		if !reflect.DeepEqual(s, again) {
			t.Fatalf("round trip changed the spec:\n%+v\n%+v", s, again)
		}
	})
}
