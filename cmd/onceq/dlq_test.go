package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

func TestDLQUsageErrorsExit2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "list"}, "want one queue name"},
		{[]string{"dlq", "list", "a", "b"}, "want one queue name"},
		{[]string{"dlq", "list", "a b"}, `queue "a b": invalid queue name`},
		{[]string{"dlq", "list", "onceq-dlq-jobs"}, "reserved queue name"},
		{[]string{"dlq", "list", "jobs", "--limit", "-1"}, "--limit -1: want 0 (all) or more"},
		{[]string{"dlq", "list", "jobs", "--limit", "many"}, "invalid argument"},
		{[]string{"dlq", "list", "jobs", "--timeout", "0s"}, "--timeout 0s"},
		{[]string{"dlq", "list", "jobs", "--brokers", "nohostport"}, "want host:port"},
		{[]string{"dlq", "requeue", "jobs"}, "give --id ID (repeatable) or --all"},
		{[]string{"dlq", "requeue", "jobs", "--all", "--id", "a"}, "not both"},
		{[]string{"dlq", "requeue", "jobs", "--id", "a b"}, `--id: onceq: id "a b": invalid task ID`},
		{[]string{"dlq", "requeue", "--all"}, "want one queue name"},
		{[]string{"dlq", "requeue", "__x", "--all"}, "reserved queue name"},
		{[]string{"dlq", "stats", "jobs", ""}, "the name is empty"},
		{[]string{"dlq", "stats", "--bogus"}, "unknown flag"},
	} {
		code, _, stderr := runCLI(t, "", tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("onceq %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
}

// writeDead writes records to the partitions they name.
func writeDead(t *testing.T, conn broker.Conn, recs ...*kgo.Record) {
	t.Helper()
	cl, err := conn.NewClient(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// deadLetter is a task as a worker dead-letters it from queue jobs.
func deadLetter(id string, attempt int, reasonText string, failed time.Time, partition int32) *kgo.Record {
	t := onceq.Task{ID: id, Queue: "jobs", Key: []byte("key-" + id), Payload: []byte("payload-" + id), Attempt: attempt,
		MaxAttempts: 3, Headers: []onceq.Header{{Key: "trace", Value: []byte("t-" + id)}},
		Enqueued: failed.Add(-time.Minute), LastError: reasonText, Failed: failed}
	r := t.Record(broker.DLQTopic("jobs"))
	r.Partition = partition
	return r
}

// handcrafted writes four dead letters of jobs (one malformed) and one of
// mail, and returns the broker address and the failure time of the first.
func handcrafted(t *testing.T) (string, broker.Conn, time.Time) {
	t.Helper()
	addr, conn := produceBroker(t)
	testutil.CreateTopic(t, conn, broker.DLQTopic("jobs"), 2)
	testutil.CreateTopic(t, conn, broker.DLQTopic("mail"), 1)
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	malformed := &kgo.Record{Topic: broker.DLQTopic("jobs"), Partition: 1, Value: []byte("raw"), Headers: []kgo.RecordHeader{
		{Key: onceq.HeaderID, Value: []byte("bad")}, {Key: onceq.HeaderDue, Value: []byte("soon")},
		{Key: onceq.HeaderError, Value: []byte(`malformed: onceq: header onceq-due "soon": malformed header`)},
		{Key: onceq.HeaderFailed, Value: []byte("1")}}}
	mail := deadLetter("m1", 1, "failed: bounce", base, 0)
	mail.Topic = broker.DLQTopic("mail")
	writeDead(t, conn,
		deadLetter("t1", 3, "max_attempts: attempt 3 of 3: "+strings.Repeat("x", 200), base, 0),
		deadLetter("t2", 1, "expired: expired at 2026-01-01T00:00:00Z", base.Add(time.Minute), 0),
		deadLetter("t3", 2, "failed: no such user", base.Add(2*time.Minute), 1),
		malformed, mail)
	return addr, conn, base
}

func TestDLQListAndStats(t *testing.T) {
	addr, _, base := handcrafted(t)
	code, out, stderr := runCLI(t, "", "--brokers", addr, "dlq", "list", "jobs")
	t.Logf("onceq dlq list jobs:\n%s", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || strings.Join(strings.Fields(lines[0]), " ") != "PARTITION/OFFSET ID ATTEMPT FAILED REASON SIZE ERROR" {
		t.Fatalf("want a header and 4 lines:\n%s", out)
	}
	for i, want := range [][]string{
		{"0/0", "t1", " 3 ", base.UTC().Format(time.RFC3339), "max_attempts", " 10 ", "attempt 3 of 3: xxx", "xxx..."},
		{"0/1", "t2", " 1 ", "expired", "expired at 2026-01-01T00:00:00Z"},
		{"1/0", "t3", " 2 ", "failed", "no such user"},
		{"1/1", "bad", "1970-01-01T00:00:00Z", "malformed", " 3 ", `onceq: header onceq-due "soon"`},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("line %q lacks %q", lines[i+1], w)
			}
		}
	}

	code, out, stderr = runCLI(t, "", "--brokers", addr, "dlq", "list", "jobs", "--json", "--limit", "3")
	if code != 0 || !strings.Contains(stderr, "3 of 4 dead letters shown") {
		t.Fatalf("--json --limit 3: exit %d, stderr %q", code, stderr)
	}
	// The dead-letter JSON as a reader that does not import dlq sees it.
	type letterLine struct {
		ID            string            `json:"id"`
		Queue         string            `json:"queue"`
		Partition     int32             `json:"partition"`
		Attempt       int               `json:"attempt"`
		Failed        string            `json:"failed"`
		Reason        string            `json:"reason"`
		Error         string            `json:"error"`
		Headers       map[string]string `json:"headers"`
		KeyBase64     []byte            `json:"key_base64"`
		PayloadBase64 []byte            `json:"payload_base64"`
	}
	var got []letterLine
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var l letterLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if l.Headers["trace"] != "t-"+l.ID {
			t.Errorf("line %q: headers", line)
		}
		got = append(got, l)
	}
	if len(got) != 3 || got[2].ID != "t3" || got[2].Partition != 1 {
		t.Fatalf("--limit 3 gave %+v", got)
	}
	first := got[0]
	failed, err := time.Parse(time.RFC3339, first.Failed)
	if err != nil || first.ID != "t1" || first.Queue != "jobs" || first.Attempt != 3 || first.Reason != "max_attempts" || !failed.Equal(base) ||
		len(first.Error) != len("attempt 3 of 3: ")+200 || string(first.PayloadBase64) != "payload-t1" || string(first.KeyBase64) != "key-t1" {
		t.Fatalf("first line %+v", first)
	}
	if !strings.Contains(out, `"payload_base64":"`+base64.StdEncoding.EncodeToString([]byte("payload-t1"))+`"`) {
		t.Errorf("payload not in base64: %s", out)
	}

	code, out, _ = runCLI(t, "", "--brokers", addr, "dlq", "stats")
	t.Logf("onceq dlq stats:\n%s", out)
	want := map[string]string{
		"jobs": "jobs 4 1970-01-01T00:00:00Z " + base.Add(2*time.Minute).UTC().Format(time.RFC3339) + " expired=1 failed=1 malformed=1 max_attempts=1",
		"mail": "mail 1 " + base.UTC().Format(time.RFC3339) + " " + base.UTC().Format(time.RFC3339) + " failed=1",
	}
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 {
		t.Fatalf("stats: exit %d:\n%s", code, out)
	}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if got := strings.Join(f, " "); got != want[f[0]] {
			t.Errorf("stats line %q, want %q", got, want[f[0]])
		}
	}
	code, out, _ = runCLI(t, "", "--brokers", addr, "dlq", "stats", "mail", "--json")
	var st struct {
		Queue       string         `json:"queue"`
		DeadLetters int            `json:"dead_letters"`
		ByReason    map[string]int `json:"by_reason"`
		Oldest      string         `json:"oldest"`
		Newest      string         `json:"newest"`
	}
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Queue != "mail" || st.DeadLetters != 1 ||
		st.ByReason["failed"] != 1 || st.Oldest != base.UTC().Format(time.RFC3339Nano) || st.Newest != st.Oldest {
		t.Fatalf("stats mail --json: exit %d, %q, %v", code, out, err)
	}

	for _, args := range [][]string{{"list", "nothing"}, {"stats", "jobs", "nothing"}, {"requeue", "nothing", "--all"}} {
		code, _, stderr = runCLI(t, "", append([]string{"--brokers", addr, "dlq"}, args...)...)
		if code != exitFailure || !strings.Contains(stderr, "no dead letters for queue nothing (topic onceq-dlq-nothing does not exist)") {
			t.Errorf("dlq %v: exit %d, %q", args, code, stderr)
		}
	}
}

// requeued reads the requeued tasks in jobs by the dead letter they came
// from.
func requeued(t *testing.T, conn broker.Conn) map[string][]onceq.Task {
	t.Helper()
	out := map[string][]onceq.Task{}
	for _, r := range testutil.ReadCommitted(t, conn, 20*time.Second, "jobs") {
		task, err := onceq.FromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		out[task.Requeued] = append(out[task.Requeued], task)
	}
	return out
}

func TestDLQRequeueAttempts(t *testing.T) {
	addr, conn, _ := handcrafted(t)
	requeue := func(args ...string) (int, string, string) {
		return runCLI(t, "", append([]string{"--brokers", addr, "dlq", "requeue", "jobs"}, args...)...)
	}
	code, out, _ := requeue("--all", "--dry-run")
	if code != 0 || !strings.Contains(out, "would requeue t1 from 0/0 (attempt 3)") || !strings.Contains(out, "would requeue 3 dead letters to jobs") {
		t.Fatalf("--dry-run: exit %d, %q", code, out)
	}
	if got := requeued(t, conn); len(got) != 0 {
		t.Fatalf("--dry-run wrote %v", got)
	}

	code, out, stderr := requeue("--id", "t1")
	if code != 0 || out != "requeued t1 from 0/0 (attempt 3)\nrequeued 1 dead letters to jobs\n" {
		t.Fatalf("--id t1: exit %d, %q, %q", code, out, stderr)
	}
	code, out, _ = requeue("--id", "t3", "--reset-attempts")
	if code != 0 || !strings.Contains(out, "requeued t3 from 1/0 (attempt 1)") {
		t.Fatalf("--id t3 --reset-attempts: exit %d, %q", code, out)
	}
	got := requeued(t, conn)
	t1, t3 := got["0/0"], got["1/0"]
	if len(t1) != 1 || len(t3) != 1 {
		t.Fatalf("requeued %v", got)
	}
	if t1[0].ID != "t1" || t1[0].Attempt != 3 || t1[0].DedupKey() != "t1@0/0#3" || !t1[0].Failed.IsZero() ||
		!strings.HasPrefix(t1[0].LastError, "max_attempts: attempt 3 of 3") || string(t1[0].Payload) != "payload-t1" ||
		string(t1[0].Key) != "key-t1" || len(t1[0].Headers) != 1 || t1[0].Queue != "jobs" || t1[0].MaxAttempts != 3 {
		t.Errorf("t1 requeued as %+v", t1[0])
	}
	if t3[0].Attempt != 1 || t3[0].DedupKey() != "t3@1/0" || t3[0].LastError != "failed: no such user" {
		t.Errorf("t3 requeued as %+v", t3[0])
	}

	// An ID without dead letters or with only a malformed one fails, naming
	// it; the others are requeued.
	code, out, stderr = requeue("--id", "t2", "--id", "nope", "--id", "bad")
	t.Logf("onceq dlq requeue jobs --id t2 --id nope --id bad:\n%s%s", out, stderr)
	if code != exitFailure || !strings.Contains(out, "requeued t2 from 0/1 (attempt 1)") ||
		!strings.Contains(stderr, `task "nope": dead letter not found in onceq-dlq-jobs`) ||
		!strings.Contains(stderr, `dead letter 1/1 of "bad": cannot be requeued: it is malformed`) {
		t.Fatalf("--id nope --id bad: exit %d, %q, %q", code, out, stderr)
	}
	// --all skips the malformed one.
	code, out, stderr = requeue("--all")
	if code != 0 || !strings.Contains(out, "requeued 3 dead letters to jobs") || !strings.Contains(stderr, `skipped: dead letter 1/1 of "bad"`) {
		t.Fatalf("--all: exit %d, %q, %q", code, out, stderr)
	}
	if got := requeued(t, conn); len(got["0/0"]) != 2 || len(got["0/1"]) != 2 || len(got["1/0"]) != 2 {
		t.Fatalf("after --all: %v", got)
	}
}

// TestDLQRequeueRunsOnce: a task a real worker dead-lettered, requeued
// three times (twice at once, once after it ran), runs exactly once more.
func TestDLQRequeueRunsOnce(t *testing.T) {
	addr, conn := produceBroker(t)
	testutil.CreateTopic(t, conn, "out", 1)
	var failing atomic.Bool
	failing.Store(true)
	var runs atomic.Int64
	h := consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
		if failing.Load() {
			return errors.New("smtp: 550 mailbox unavailable")
		}
		runs.Add(1)
		return task.Emit(onceq.Task{ID: task.ID, Queue: "out", Payload: task.Payload})
	})
	reg := prometheus.NewRegistry()
	w, err := consumer.New(consumer.Conn(conn), consumer.Group("g"), consumer.Queues("jobs"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h), consumer.MaxAttempts(1), consumer.Registerer(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	t.Cleanup(func() { _ = stop() })

	if code, _, stderr := runCLI(t, "", "--brokers", addr, "produce", "--queue", "jobs", "--id", "doomed", "hello"); code != 0 {
		t.Fatalf("produce: %s", stderr)
	}
	waitFor(t, "the dead letter", func() bool {
		recs, _ := testutil.ReadCommittedErr(conn, 10*time.Second, broker.DLQTopic("jobs"))
		return len(recs) == 1
	})
	code, out, _ := runCLI(t, "", "--brokers", addr, "dlq", "list", "jobs")
	if code != 0 || !strings.Contains(out, "doomed") || !strings.Contains(out, "max_attempts") ||
		!strings.Contains(out, "attempt 1 of 1: smtp: 550 mailbox unavailable") {
		t.Fatalf("list: exit %d:\n%s", code, out)
	}
	code, out, _ = runCLI(t, "", "--brokers", addr, "dlq", "stats", "jobs")
	if code != 0 || !strings.Contains(out, "max_attempts=1") {
		t.Fatalf("stats: exit %d:\n%s", code, out)
	}

	failing.Store(false)
	requeue := func() {
		t.Helper()
		if code, out, stderr := runCLI(t, "", "--brokers", addr, "dlq", "requeue", "jobs", "--id", "doomed"); code != 0 ||
			!strings.Contains(out, "requeued 1 dead letters to jobs") {
			t.Fatalf("requeue: exit %d, %q, %q", code, out, stderr)
		}
	}
	duplicates := func() float64 { return counter(t, reg, "onceq_tasks_processed_total", "duplicate") }
	requeue()
	requeue()
	waitFor(t, "the requeued task and its duplicate", func() bool { return runs.Load() >= 1 && duplicates() >= 1 })
	requeue()
	waitFor(t, "the third requeue", func() bool { return duplicates() >= 2 })
	if err := stop(); err != nil {
		t.Fatalf("worker: %v", err)
	}

	if runs.Load() != 1 {
		t.Fatalf("the requeued task ran %d times, want 1", runs.Load())
	}
	outs := testutil.ReadCommitted(t, conn, 20*time.Second, "out")
	if len(outs) != 1 {
		t.Fatalf("%d outputs, want 1", len(outs))
	}
	if task, err := onceq.FromRecord(outs[0]); err != nil || task.ID != "doomed" || string(task.Payload) != "hello" {
		t.Fatalf("output %+v, %v", task, err)
	}
	if dead := testutil.ReadCommitted(t, conn, 20*time.Second, broker.DLQTopic("jobs")); len(dead) != 1 {
		t.Fatalf("%d dead letters, want still 1", len(dead))
	}
}

// counter sums a counter of reg over the label outcome.
func counter(t *testing.T, reg *prometheus.Registry, name, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
