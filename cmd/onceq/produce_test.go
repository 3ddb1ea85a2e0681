package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/internal/testutil"
)

// produceBroker starts an in-process broker with queue jobs (2 partitions)
// and returns its address.
func produceBroker(t *testing.T) (string, broker.Conn) {
	t.Helper()
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "jobs", 2)
	return conn.Brokers[0], conn
}

func readJobs(t *testing.T, conn broker.Conn, topics ...string) map[string]onceq.Task {
	t.Helper()
	out := map[string]onceq.Task{}
	for _, r := range testutil.ReadCommitted(t, conn, 20*time.Second, topics...) {
		task, err := onceq.FromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		out[task.ID] = task
	}
	return out
}

func TestProduceOne(t *testing.T) {
	addr, conn := produceBroker(t)
	code, out, stderr := runCLI(t, "", "--brokers", addr, "produce", "--queue", "jobs", "--id", "t1", "--key", "user-42",
		"--header", "trace=abc", "--header", "lang=en", "--max-attempts", "3", "--timeout", "30s", "--ttl", "1h", `{"to":"ada"}`)
	if code != 0 || !strings.HasPrefix(out, "t1 jobs/") || !strings.HasSuffix(out, "@0\n") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, stderr = runCLI(t, "payload from stdin", "--brokers", addr, "produce", "--queue", "jobs", "--id", "t2", "--delay", "90s", "-")
	if code != 0 || !strings.HasPrefix(out, "t2 onceq-delay-30s/") || !strings.HasSuffix(out, " delayed\n") {
		t.Fatalf("delayed: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	at := time.Now().Add(26 * time.Hour).UTC().Truncate(time.Second)
	code, out, stderr = runCLI(t, "", "--brokers", addr, "produce", "--queue", "jobs", "--id", "t3", "--at", at.Format(time.RFC3339), "--tx", "x")
	if code != 0 || !strings.HasPrefix(out, "t3 onceq-delay-1d/") {
		t.Fatalf("--at --tx: exit %d, stdout %q, stderr %q", code, out, stderr)
	}

	tasks := readJobs(t, conn, "jobs", "onceq-delay-30s", "onceq-delay-1d")
	t1 := tasks["t1"]
	if string(t1.Payload) != `{"to":"ada"}` || string(t1.Key) != "user-42" || t1.MaxAttempts != 3 || t1.Timeout != 30*time.Second ||
		time.Until(t1.Expires) < 59*time.Minute || len(t1.Headers) != 2 || t1.Headers[0].Key != "trace" || t1.Headers[1].Key != "lang" {
		t.Errorf("t1 read back as %+v", t1)
	}
	if t2 := tasks["t2"]; string(t2.Payload) != "payload from stdin" || t2.Queue != "jobs" || time.Until(t2.Due) < 80*time.Second {
		t.Errorf("t2 read back as %+v", t2)
	}
	if t3 := tasks["t3"]; !t3.Due.Equal(at) || t3.Queue != "jobs" {
		t.Errorf("t3 read back as %+v, due %v", t3, at)
	}
}

// TestProducePriority: --priority N is written as the onceq-priority
// header of a task from flags, and of the lines that set no priority of
// their own; a line's own priority is kept, and without either a task
// carries no header (priority 0).
func TestProducePriority(t *testing.T) {
	addr, conn := produceBroker(t)
	if code, out, stderr := runCLI(t, "", "--brokers", addr, "produce", "--queue", "jobs", "--id", "p7", "--priority", "7", "x"); code != 0 {
		t.Fatalf("--priority 7: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if code, out, stderr := runCLI(t, "", "--brokers", addr, "produce", "--queue", "jobs", "--id", "p0", "x"); code != 0 {
		t.Fatalf("without --priority: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	lines := `{"id":"line-own","priority":9}` + "\n" + `{"id":"line-none"}` + "\n" + `{"id":"line-zero","priority":0}` + "\n"
	if code, out, stderr := runCLI(t, lines, "--brokers", addr, "produce", "--queue", "jobs", "--file", "-", "--priority", "3", "--tx"); code != 0 {
		t.Fatalf("--file with --priority 3: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	got := map[string]string{}
	for _, r := range testutil.ReadCommitted(t, conn, 20*time.Second, "jobs") {
		task, err := onceq.FromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		got[task.ID] = "none"
		for _, h := range r.Headers {
			if h.Key == onceq.HeaderPriority {
				got[task.ID] = string(h.Value)
			}
		}
	}
	// A line's priority 0 is no priority, as its max_attempts 0 is none:
	// --priority applies to it.
	want := map[string]string{"p7": "7", "p0": "none", "line-own": "9", "line-none": "3", "line-zero": "3"}
	if !maps.Equal(got, want) {
		t.Fatalf("onceq-priority headers by task: %v, want %v", got, want)
	}
}

const goodLines = `{"queue":"jobs","id":"a","payload":"text"}

{"id":"b","payload":{"n": 1},"delay":"2m","headers":{"z":"1","a":"2"}}
{"id":"c","payload_base64":"AAEC","key":"k","max_attempts":2,"priority":5,"timeout":"1s","ttl":"1h"}
`

func TestProduceFile(t *testing.T) {
	addr, conn := produceBroker(t)
	file := filepath.Join(t.TempDir(), "tasks.jsonl")
	if err := os.WriteFile(file, []byte(goodLines), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI(t, "", "--brokers", addr, "produce", "--queue", "jobs", "--file", file)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "a jobs/") || !strings.HasPrefix(lines[1], "b onceq-delay-2m/") ||
		!strings.HasSuffix(lines[1], " delayed") || !strings.HasPrefix(lines[2], "c jobs/") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, stderr = runCLI(t, strings.ReplaceAll(goodLines, `"id":"`, `"id":"tx-`), "--brokers", addr, "produce", "--queue", "jobs", "--file", "-", "--tx", "--quiet", "--rate", "1000")
	if code != 0 || !strings.HasPrefix(out, "submitted 3 tasks (1 delayed) in ") {
		t.Fatalf("--tx --quiet: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	tasks := readJobs(t, conn, "jobs", "onceq-delay-2m")
	if len(tasks) != 6 {
		t.Fatalf("read %d tasks, want 6: %v", len(tasks), tasks)
	}
	b := tasks["b"]
	if string(b.Payload) != `{"n":1}` || len(b.Headers) != 2 || b.Headers[0].Key != "a" || b.Queue != "jobs" {
		t.Errorf("b read back as %+v", b)
	}
	c := tasks["tx-c"]
	if !bytes.Equal(c.Payload, []byte{0, 1, 2}) || string(c.Key) != "k" || c.MaxAttempts != 2 || c.Priority != 5 || c.Timeout != time.Second || c.Expires.IsZero() {
		t.Errorf("tx-c read back as %+v", c)
	}
}

// TestProduceBadLine checks that a bad line stops the run with its number:
// without --tx the lines before it are submitted, with --tx nothing is.
func TestProduceBadLine(t *testing.T) {
	addr, conn := produceBroker(t)
	input := `{"id":"ok1"}
{"id":"ok2"}
{"id":"bad","delay":"soon"}
{"id":"never"}
`
	code, out, stderr := runCLI(t, input, "--brokers", addr, "produce", "--queue", "jobs", "--file", "-", "--tx")
	if code != exitUsage || !strings.Contains(stderr, `line 3: delay "soon": invalid task: want a duration`) || !strings.Contains(stderr, "nothing of the file was submitted") || out != "" {
		t.Fatalf("--tx: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if got := readJobs(t, conn, "jobs"); len(got) != 0 {
		t.Fatalf("--tx with a bad line submitted %v", got)
	}
	code, out, stderr = runCLI(t, input, "--brokers", addr, "produce", "--queue", "jobs", "--file", "-")
	if code != exitUsage || !strings.Contains(stderr, "line 3: ") || strings.Count(out, "\n") != 2 {
		t.Fatalf("without --tx: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	got := readJobs(t, conn, "jobs")
	if len(got) != 2 || got["ok1"].ID == "" || got["ok2"].ID == "" {
		t.Fatalf("without --tx: submitted %v, want ok1 and ok2", got)
	}
}

// TestProduceErrorsExit2 checks that every validation error of the root
// package, and every bad flag or line, exits 2 with a message naming it.
// Nothing here reaches a broker.
func TestProduceErrorsExit2(t *testing.T) {
	big := strings.Repeat("x", onceq.DefaultMaxMessageBytes)
	for _, tc := range []struct {
		stdin string
		args  []string
		want  string
	}{
		// The root package's validation errors, from flags.
		{"", []string{"--queue", "a b"}, `queue "a b": invalid queue name`},
		{"", []string{"--queue", "onceq-x"}, "reserved queue name"},
		{"", []string{"--queue", "q", "--id", "has space"}, "invalid task ID"},
		{"", []string{"--queue", "q", "--delay", "-5s"}, "negative delay"},
		{"", []string{"--queue", "q", "--delay", "2h", "--ttl", "1h"}, "expiry before due time"},
		{"", []string{"--queue", "q", "--header", "onceq-due=1"}, "malformed header"},
		{big, []string{"--queue", "q", "-"}, "record too large"},
		// The same in JSON lines.
		{`{"queue":"a b"}`, []string{"--file", "-"}, `line 1: queue "a b": invalid queue name`},
		{`{"queue":"onceq-x"}`, []string{"--file", "-"}, "line 1: queue \"onceq-x\": reserved queue name"},
		{"\n" + `{"queue":"q","id":"a\tb"}`, []string{"--file", "-"}, "line 2: id"},
		{`{"queue":"q","delay":"-1s"}`, []string{"--file", "-"}, "line 1: delay \"-1s\": negative delay"},
		{`{"queue":"q","at":"2030-01-01T00:00:00Z","ttl":"1s"}`, []string{"--file", "-"}, "line 1: ttl \"1s\": expiry before due time"},
		{`{"queue":"q","max_attempts":-1}`, []string{"--file", "-"}, "line 1: max_attempts \"-1\": invalid task: want zero (the worker's default) or 1 to 2147483647"},
		{`{"queue":"q","timeout":"-1s"}`, []string{"--file", "-"}, "line 1: timeout \"-1s\": invalid task"},
		{`{"queue":"q","headers":{"onceq-x":"1"}}`, []string{"--file", "-"}, "line 1: header \"onceq-x\": malformed header"},
		{`{"queue":"q","payload":"` + big + `"}`, []string{"--file", "-"}, "line 1: payload: record too large"},
		// Bad flags.
		{"", []string{"--queue", "q", "--delay", "soon"}, `--delay "soon": invalid task: want a duration`},
		{"", []string{"--queue", "q", "--at", "tomorrow"}, `--at "tomorrow": invalid task: want an RFC 3339 time`},
		{"", []string{"--queue", "q", "--delay", "1s", "--at", "2030-01-01T00:00:00Z"}, "give --delay or --at, not both"},
		{"", []string{"--queue", "q", "--ttl", "-1h"}, `--ttl "-1h": invalid task: want a positive duration`},
		{"", []string{"--queue", "q", "--timeout", "1.5ms"}, "--timeout 1.5ms: want a positive whole number of milliseconds"},
		{"", []string{"--queue", "q", "--max-attempts", "-1"}, "--max-attempts -1"},
		{"", []string{"--queue", "q", "--priority", "-1"}, "--priority -1: want 0 (the default, the lowest) to 9 (the highest)"},
		{"", []string{"--file", "-", "--priority", "10"}, "--priority 10: want 0 (the default, the lowest) to 9 (the highest)"},
		{`{"queue":"q","priority":10}`, []string{"--file", "-"}, `line 1: priority "10": invalid task: want 0 (the default, the lowest) to 9 (the highest)`},
		{"", []string{"--queue", "q", "--header", "novalue"}, `--header "novalue": want key=value`},
		{"", []string{"--queue", "q", "--rate", "-1"}, "--rate -1"},
		{"", []string{"--queue", "q", "--create-queues", "-1"}, "--create-queues -1"},
		{"", []string{"--queue", "q", "a", "b"}, "want at most one argument"},
		{"", []string{"x"}, "--queue: missing"},
		{"", []string{"--file", "-", "--id", "x"}, "--id describes one task"},
		{"", []string{"--file", "-", "payload"}, "a payload argument and --file"},
		{"", []string{"--file", "/does/not/exist"}, "--file: open /does/not/exist"},
		{"", []string{"--queue", "q", "--brokers", "nohostport"}, "want host:port"},
		// Bad lines.
		{`{"queue":"q","dely":"1s"}`, []string{"--file", "-"}, `line 1: invalid JSON line: unknown field "dely": the fields are queue,`},
		{`{"queue":"q","max_attempts":"3"}`, []string{"--file", "-"}, "line 1: max_attempts: invalid JSON line: got a JSON string, want a whole number"},
		{`{"queue":"q","headers":{"a":1}}`, []string{"--file", "-"}, `line 1: headers: invalid JSON line: header "a": got a JSON number, want a string`},
		{`{"queue":"q","headers":[]}`, []string{"--file", "-"}, "line 1: headers: invalid JSON line: got a JSON array"},
		{`["q"]`, []string{"--file", "-"}, "line 1: invalid JSON line: got a JSON array, want an object"},
		{`{"queue":"q"`, []string{"--file", "-"}, "line 1: invalid JSON line: incomplete JSON"},
		{`{"queue":"q",}`, []string{"--file", "-"}, "line 1: invalid JSON line: not valid JSON at byte"},
		{`{"queue":"q"} {"queue":"q"}`, []string{"--file", "-"}, "line 1: invalid JSON line: more than one JSON value"},
		{`{"id":"x"}`, []string{"--file", "-"}, `line 1: queue: missing: give "queue"`},
		{`{"queue":"q","payload":"a","payload_base64":"YQ=="}`, []string{"--file", "-"}, "line 1: payload: invalid JSON line: payload and payload_base64: give one"},
		{`{"queue":"q","payload_base64":"!!"}`, []string{"--file", "-"}, "line 1: payload_base64: invalid JSON line: not standard base64"},
		{`{"queue":"q","at":"2030-01-01"}`, []string{"--file", "-"}, `line 1: at "2030-01-01": invalid task: want an RFC 3339 time`},
		{`{"queue":"q","delay":"1s","at":"2030-01-01T00:00:00Z"}`, []string{"--file", "-"}, "line 1: delay \"1s\": invalid task: give delay or at, not both"},
		{"{}\n" + strings.Repeat("x", maxLine+1), []string{"--file", "-", "--queue", "q", "--tx"}, "line 2: longer than 8 MiB"},
	} {
		args := append([]string{"produce"}, tc.args...)
		code, out, stderr := runCLI(t, tc.stdin, args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || out != "" {
			t.Errorf("onceq %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", strings.Join(args, " "), code, out, cut(stderr), tc.want)
		}
	}
}

func cut(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

func TestProduceMissingQueue(t *testing.T) {
	addr, conn := produceBroker(t)
	code, _, stderr := runCLI(t, "", "--brokers", addr, "produce", "--queue", "nope", "x")
	if code != exitFailure || !strings.Contains(stderr, `onceq topics create nope`) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCLI(t, "", "--brokers", addr, "produce", "--queue", "made", "--create-queues", "3", "x")
	if code != 0 {
		t.Fatalf("--create-queues: exit %d, stderr %q", code, stderr)
	}
	if got := readJobs(t, conn, "made"); len(got) != 1 {
		t.Fatalf("made holds %v", got)
	}
}

// TestProduceKcat checks that kcat, a third-party Kafka client, reads a
// task written by onceq produce with its onceq headers.
func TestProduceKcat(t *testing.T) {
	kcat := testutil.Kcat(t)
	addr, _ := produceBroker(t)
	code, out, stderr := runCLI(t, "", "--brokers", addr, "produce", "--queue", "jobs", "--id", "kc-1", "--key", "user-7",
		"--max-attempts", "4", "--timeout", "30s", "--delay", "0s", "--header", "trace=t9", "hello kcat")
	if code != 0 {
		t.Fatalf("produce: exit %d %q %q", code, out, stderr)
	}
	read, err := exec.Command(kcat, "-b", addr, "-C", "-t", "jobs", "-e", "-q", "-c", "1",
		"-X", "isolation.level=read_committed", "-f", "%k|%s|%h\n").CombinedOutput()
	if err != nil {
		t.Fatalf("kcat -C: %v\n%s", err, read)
	}
	got := strings.TrimSpace(string(read))
	for _, want := range []string{"user-7|hello kcat|", "onceq-id=kc-1", "onceq-max-attempts=4", "onceq-timeout=30000", "onceq-enqueued=", "trace=t9"} {
		if !strings.Contains(got, want) {
			t.Errorf("kcat read %q, want %q in it", got, want)
		}
	}
}

// lineOf encodes a task decoded by decodeLine at now back into a JSON line.
func lineOf(task onceq.Task, now time.Time) []byte {
	l := map[string]any{"queue": task.Queue, "payload_base64": base64.StdEncoding.EncodeToString(task.Payload)}
	if task.ID != "" {
		l["id"] = task.ID
	}
	if len(task.Key) > 0 {
		l["key"] = string(task.Key)
	}
	if task.Delay != 0 {
		l["delay"] = task.Delay.String()
	}
	if !task.Due.IsZero() {
		l["at"] = task.Due.Format(time.RFC3339Nano)
	}
	if !task.Expires.IsZero() {
		l["ttl"] = task.Expires.Sub(now).String()
	}
	if task.Timeout != 0 {
		l["timeout"] = task.Timeout.String()
	}
	if task.MaxAttempts != 0 {
		l["max_attempts"] = task.MaxAttempts
	}
	if task.Priority != 0 {
		l["priority"] = task.Priority
	}
	if len(task.Headers) > 0 {
		hs := map[string]string{}
		for _, h := range task.Headers {
			hs[h.Key] = string(h.Value)
		}
		l["headers"] = hs
	}
	b, _ := json.Marshal(l)
	return b
}

func sameTask(a, b onceq.Task) bool {
	if a.Queue != b.Queue || a.ID != b.ID || !bytes.Equal(a.Key, b.Key) || !bytes.Equal(a.Payload, b.Payload) ||
		a.Delay != b.Delay || !a.Due.Equal(b.Due) || !a.Expires.Equal(b.Expires) || a.Timeout != b.Timeout ||
		a.MaxAttempts != b.MaxAttempts || a.Priority != b.Priority || len(a.Headers) != len(b.Headers) {
		return false
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !bytes.Equal(a.Headers[i].Value, b.Headers[i].Value) {
			return false
		}
	}
	return true
}

// FuzzDecodeLine: decoding never panics, and a line that decodes encodes
// back into a line that decodes to the same task.
func FuzzDecodeLine(f *testing.F) {
	for _, l := range strings.Split(goodLines, "\n") {
		f.Add(l)
	}
	for _, l := range []string{
		`{"queue":"q","at":"2030-01-01T00:00:00.123456789+05:30","ttl":"100000h"}`,
		`{"queue":"q","payload":null,"payload_base64":""}`,
		`{"queue":"q","payload":[1,"a",{"b":null}],"headers":{}}`,
		`{"queue":"q","delay":"1h2m3.5s","timeout":"1ms"}`,
		`{"queue":"q","key":"\u00e9\ud800"}`,
		`{"queue":"q","dely":"1s"}`, `{"queue":1}`, `[]`, `null`, `{"queue":"q"} x`, ``,
		`{"queue":"q","queue":"r"}`, `{"headers":{"a":"1","a":"2"}}`, "\uFEFF{}", "{\"payload\":\"\xff\"}", `{"payload":"\udc00"}`,
		`{"max_attempts":2147483648}`, `{"priority":9}`, `{"priority":10}`, `{"at":"1969-12-31T23:59:59Z"}`, `{"headers":{"onceq-id":"x"}}`, `{"timeout":"500us"}`,
	} {
		f.Add(l)
	}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, line string) {
		task, _, err := decodeLine([]byte(line), "default", now)
		if err != nil {
			if exitCode(err) != exitUsage {
				t.Fatalf("decode error %v exits %d, want 2", err, exitCode(err))
			}
			return
		}
		again, _, err := decodeLine(lineOf(task, now), "default", now)
		if err != nil {
			t.Fatalf("re-encoded line %s: %v", lineOf(task, now), err)
		}
		if !sameTask(task, again) {
			t.Fatalf("round trip changed the task:\n%+v\n%+v", task, again)
		}
	})
}

// TestBadInputExits2NothingWritten is issue 17's acceptance for onceq
// produce: against a real broker (the embedded one, over TCP), every bad
// flag and JSON line exits 2 with a message naming it, and nothing reaches
// the queue or a delay bucket. The first cases are bug 6: values the
// worker's decoder refuses were acknowledged, then dead-lettered as
// malformed.
func TestBadInputExits2NothingWritten(t *testing.T) {
	addr, conn := produceBroker(t)
	flags := []struct {
		args []string
		want string
	}{
		{[]string{"--max-attempts", "2147483648"}, "--max-attempts 2147483648: want 0 (the worker's default) or 1 to 2147483647"},
		{[]string{"--priority", "10"}, "--priority 10: want 0 (the default, the lowest) to 9 (the highest)"},
		{[]string{"--priority", "-1"}, "--priority -1: want 0 (the default, the lowest) to 9 (the highest)"},
		{[]string{"--priority", "10", "--tx"}, "--priority 10"},
		{[]string{"--priority", "high"}, `invalid argument "high" for "--priority" flag`},
		{[]string{"--at", "1969-12-31T23:59:59Z"}, `--at "1969-12-31T23:59:59Z": invalid task: want a time from 1970-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z`},
		{[]string{"--at", "1969-07-20T20:17:00Z", "--tx"}, `--at "1969-07-20T20:17:00Z"`},
		{[]string{"--header", "onceq-id=x"}, `--header "onceq-id": malformed header: the header is onceq's own: set --id instead`},
		{[]string{"--header", "onceq-due=1"}, "set --delay or --at instead"},
		{[]string{"--header", "onceq-delay=5s"}, `--header "onceq-delay": malformed header: not a header of onceq's wire format`},
		{[]string{"--timeout", "500us"}, "--timeout 500us: want a positive whole number of milliseconds"},
		{[]string{"--delay", "soon"}, `--delay "soon": invalid task: want a duration`},
		{[]string{"--ttl", "-1h"}, `--ttl "-1h": invalid task: want a positive duration`},
		{[]string{"--delay", "2h", "--ttl", "1h"}, `--ttl "1h": expiry before due time`},
		{[]string{"--id", "a b"}, `--id "a b": invalid task ID`},
	}
	for _, tc := range flags {
		args := append([]string{"--brokers", addr, "produce", "--queue", "jobs"}, tc.args...)
		args = append(args, "payload")
		code, out, stderr := runCLI(t, "", args...)
		if code != exitUsage || out != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("onceq %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", strings.Join(args, " "), code, out, cut(stderr), tc.want)
		}
	}
	lines := []struct{ line, want string }{
		{`{"id":"a","max_attempts":2147483648}`, `line 1: max_attempts "2147483648": invalid task: want zero (the worker's default) or 1 to 2147483647`},
		{`{"id":"a","priority":10}`, `line 1: priority "10": invalid task: want 0 (the default, the lowest) to 9 (the highest)`},
		{`{"id":"a","priority":-1}`, `line 1: priority "-1": invalid task`},
		{`{"id":"a","at":"1969-07-20T20:17:00Z"}`, `line 1: at "1969-07-20T20:17:00Z": invalid task: want a time from 1970-01-01T00:00:00Z`},
		{`null`, "line 1: invalid JSON line: got null, want an object"},
		{`{"id":"a","id":"b"}`, "line 1: id: invalid JSON line: the field appears twice"},
		{`{"id":"a","headers":{"h":"1","h":"2"}}`, `line 1: headers: invalid JSON line: header "h" appears twice`},
		{`{"ID":"a"}`, `line 1: invalid JSON line: unknown field "ID"`},
		{"\uFEFF{\"id\":\"a\"}", "line 1: invalid JSON line: the line starts with a byte order mark"},
		{"{\"id\":\"a\",\"payload\":\"caf\xe9\"}", "line 1: invalid JSON line: byte 24 (0xe9) is not UTF-8"},
		{`{"id":"a","payload":"\ud83d"}`, `line 1: invalid JSON line: byte 21: \ud83d is half a UTF-16 surrogate pair`},
		{`{"id":"a","headers":{"onceq-id":"b"}}`, `line 1: header "onceq-id": malformed header: the header is onceq's own: set id instead`},
		{`{"id":"a","headers":{"onceq-delay":"5s"}}`, `not a header of onceq's wire format`},
		{`{"id":"a","timeout":"500us"}`, `line 1: timeout "500µs": invalid task: zero (the worker's default) or at least 1ms`},
		{`{"id":"a","delay":"90s","at":"2030-01-01T00:00:00Z"}`, "give delay or at, not both"},
	}
	for _, tc := range lines {
		for _, tx := range []bool{false, true} {
			args := []string{"--brokers", addr, "produce", "--queue", "jobs", "--file", "-"}
			if tx {
				args = append(args, "--tx")
			}
			input := tc.line + "\n" + `{"id":"never"}` + "\n"
			code, out, stderr := runCLI(t, input, args...)
			if code != exitUsage || out != "" || !strings.Contains(stderr, tc.want) {
				t.Errorf("line %q (--tx %v): exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.line, tx, code, out, cut(stderr), tc.want)
			}
		}
	}
	topics := append([]string{"jobs"}, delay.DefaultPlanner().Topics()...)
	if recs := testutil.ReadCommitted(t, conn, 20*time.Second, topics...); len(recs) != 0 {
		t.Fatalf("bad input wrote %d records, first %s/%d@%d", len(recs), recs[0].Topic, recs[0].Partition, recs[0].Offset)
	}
}
