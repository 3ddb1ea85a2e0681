package inspect

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq"
)

func TestWriteTask(t *testing.T) {
	at := time.Date(2026, 11, 24, 12, 0, 0, 120e6, time.UTC)
	var b bytes.Buffer
	err := WriteTask(&b, onceq.TaskRecord{ID: "order-7", Queue: "emails", State: onceq.StateSucceeded, Attempt: 2, MaxAttempts: 5, Priority: 7,
		Enqueued: at, Started: at.Add(3 * time.Second), Finished: at.Add(3*time.Second + 15*time.Millisecond),
		Worker: "onceq-3f2a", Result: []byte(`{"sent":true}`), Partition: 3, Offset: 1042})
	if err != nil {
		t.Fatal(err)
	}
	want := `task      order-7
queue     emails
state     succeeded
attempt   2 of 5
priority  7
enqueued  2026-11-24T12:00:00.120Z
started   2026-11-24T12:00:03.120Z
finished  2026-11-24T12:00:03.135Z (ran 15ms)
worker    onceq-3f2a
result    {"sent":true}
record    emails/3@1042
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestWriteTaskNotRun: a producer's record of a task not yet run names the
// partition its task waits in, and no offset: it has no run.
func TestWriteTaskNotRun(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTask(&b, onceq.TaskRecord{ID: "order-8", Queue: "emails", State: onceq.StatePending, Partition: 5}); err != nil {
		t.Fatal(err)
	}
	if want := "record  emails/5 (not run yet)\n"; !strings.HasSuffix(b.String(), want) {
		t.Errorf("got:\n%s\nwant it to end with:\n%s", b.String(), want)
	}
}

func TestWriteTaskRunning(t *testing.T) {
	var b bytes.Buffer
	started := time.Now().Add(-90 * time.Second)
	if err := WriteTask(&b, onceq.TaskRecord{ID: "order-9", Queue: "emails", State: onceq.StateRunning, Attempt: 1, Started: started, Worker: "w-1/ab", Partition: 2, Offset: 7}); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(strings.Fields(b.String()), " ")
	for _, want := range []string{"state running ", "(running for 1m30s) ", "worker w-1/ab ", "record emails/2@7"} {
		if !strings.Contains(got, want) {
			t.Errorf("got:\n%s\nwant it to hold %q", b.String(), want)
		}
	}
}

func TestFormatResult(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want string
	}{
		{[]byte("ok"), "ok"},
		{[]byte{}, "(empty)"},
		{[]byte{0, 1, 0xff}, "base64:AAH/"},
		{[]byte("a\x1bb"), "base64:YRti"},
		{[]byte(strings.Repeat("x", maxTextResult+1)), strings.Repeat("x", maxTextResult) + " ... (4097 bytes in all: --json has it whole)"},
	} {
		if got := FormatResult(tc.in); got != tc.want {
			t.Errorf("FormatResult(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestWriteTasksAndJSON(t *testing.T) {
	rs := []onceq.TaskRecord{
		{ID: "a", Queue: "q", State: onceq.StateDead, Attempt: 3, Finished: time.UnixMilli(1_700_000_000_000), Error: strings.Repeat("e", 100)},
		{ID: "b", Queue: "q", State: onceq.StateScheduled, Attempt: 1, Due: time.UnixMilli(1_800_000_000_000)},
	}
	var b bytes.Buffer
	if err := WriteTasks(&b, rs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[1], strings.Repeat("e", TableErrorWidth-3)+"...") {
		t.Errorf("table:\n%s", b.String())
	}
	b.Reset()
	if err := WriteJSON(&b, rs...); err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		got, err := onceq.DecodeTaskRecord([]byte(line))
		if err != nil || got.ID != rs[i].ID || got.State != rs[i].State {
			t.Errorf("line %d: %+v, %v", i, got, err)
		}
	}
}

// TestWriteAttempts: the failed attempts before a task's last record, one
// a line with when it started, how long it ran and its error; none for a
// task of one record.
func TestWriteAttempts(t *testing.T) {
	at := time.Date(2026, 11, 24, 12, 0, 0, 120e6, time.UTC)
	run := func(attempt int, st onceq.TaskState, err string) onceq.TaskRecord {
		return onceq.TaskRecord{ID: "order-7", Attempt: attempt, State: st, Started: at, Finished: at.Add(3 * time.Millisecond), Error: err}
	}
	var b bytes.Buffer
	if err := WriteAttempts(&b, []onceq.TaskRecord{run(1, onceq.StateSucceeded, "")}); err != nil || b.Len() != 0 {
		t.Fatalf("one record: %q, %v; want nothing", b.String(), err)
	}
	if err := WriteAttempts(&b, []onceq.TaskRecord{run(1, onceq.StateRetrying, "smtp: 550"), run(2, onceq.StateRetrying, "timeout"),
		run(3, onceq.StateSucceeded, "")}); err != nil {
		t.Fatal(err)
	}
	want := `failed attempts
  1  2026-11-24T12:00:00.120Z  ran 3ms  smtp: 550
  2  2026-11-24T12:00:00.120Z  ran 3ms  timeout
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
