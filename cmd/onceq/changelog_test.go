package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// TestCollidingGroupsRunEveryTaskOnce pins bug 1 of issue 17 with real
// worker processes: group "a-b" on queue "c" and group "a" on queue "b-c"
// had one changelog, onceq-changelog-a-b-c. Group a-b ran its 200 tasks;
// group a then restored a-b's processed IDs from it and skipped all 200 of
// its own tasks, which have the same IDs. Now each group has its own
// changelog, both run every task exactly once, and checkpoint verify finds
// both stores in sync.
func TestCollidingGroupsRunEveryTaskOnce(t *testing.T) {
	const n = 200
	_, conn := testutil.StartBroker(t, "")
	addr := conn.Brokers[0]
	for _, q := range []string{"c", "b-c", "out-c", "out-bc"} {
		testutil.CreateTopic(t, conn, q, 2)
	}
	cl, err := conn.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		for _, q := range []string{"c", "b-c"} {
			task := onceq.Task{ID: fmt.Sprintf("task-%03d", i), Queue: q, Payload: []byte("p")}
			recs = append(recs, task.Record(q))
		}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	type run struct{ group, queue, out, dir string }
	runs := []run{{"a-b", "c", "out-c", ""}, {"a", "b-c", "out-bc", ""}}
	var procs []*testutil.Process
	for i := range runs {
		r := &runs[i]
		r.dir = filepath.Join(t.TempDir(), "w")
		p := testutil.Start(t, "worker", "--brokers", addr, "--group", r.group, "--queue", r.queue, "--handler", "count:"+r.out,
			"--checkpoint-dir", r.dir, "--metrics-addr", "", "--session-timeout", "6s", "--transaction-timeout", "5s",
			"--commit-interval", "50ms", "--log-level", "warn", "--delay-service=false")
		procs = append(procs, p)
		// The first group finishes before the second starts, as in the
		// issue: the second then finds the first one's records, if the
		// changelog is shared.
		waitOutputs(t, conn, r.out, n, p)
	}
	for _, p := range procs {
		p.Signal(syscall.SIGTERM)
		if code, err := p.Wait(30 * time.Second); err != nil || code != 0 {
			t.Fatalf("worker after SIGTERM: exit %d, %v\n%s", code, err, p.Output())
		}
	}
	for _, r := range runs {
		runs := map[string]int{}
		for _, rec := range testutil.ReadCommitted(t, conn, 30*time.Second, r.out) {
			task, err := onceq.FromRecord(rec)
			if err != nil {
				t.Fatal(err)
			}
			runs[task.ID]++
			for _, h := range rec.Headers {
				if h.Key == "runs" && string(h.Value) != "1" {
					t.Errorf("group %s: task %s has run counter %s", r.group, task.ID, h.Value)
				}
			}
		}
		if len(runs) != n {
			t.Errorf("group %s: %d of %d tasks ran", r.group, len(runs), n)
		}
		for id, c := range runs {
			if c != 1 {
				t.Errorf("group %s: task %s ran %d times", r.group, id, c)
			}
		}
		code, out, stderr := runCLI(t, "", "checkpoint", "verify", filepath.Join(r.dir, "store"), "--group", r.group, "--brokers", addr)
		if code != 0 || !strings.Contains(out, "partitions in sync") {
			t.Errorf("checkpoint verify of group %s: exit %d\n%s%s", r.group, code, out, stderr)
		}
	}
	topics := listTopics(t, conn)
	for _, want := range []string{broker.ChangelogTopic("a-b", "c"), broker.ChangelogTopic("a", "b-c")} {
		if !strings.Contains(strings.Join(topics, " "), want) {
			t.Errorf("no changelog %s among %v", want, topics)
		}
	}
}

// TestWorkerRefusesLegacyChangelog: a worker whose changelog still has its
// old name exits, saying why and how to move on, and creates nothing.
func TestWorkerRefusesLegacyChangelog(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	addr := conn.Brokers[0]
	legacy := broker.LegacyChangelogTopic("a", "b-c")
	for _, q := range []string{"b-c", legacy} {
		testutil.CreateTopic(t, conn, q, 1)
	}
	p := testutil.Start(t, "worker", "--brokers", addr, "--group", "a", "--queue", "b-c", "--handler", "noop",
		"--checkpoint-dir", t.TempDir(), "--metrics-addr", "")
	code, err := p.Wait(60 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	out := p.Output()
	for _, want := range []string{"its changelog is onceq-changelog-a-b-c", `group "a-b" with queue "c" share it`,
		"onceq topics delete onceq-changelog-a-b-c --internal", "the workers then start onceq-checkpoint-1-a-b-c"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if code != exitFailure {
		t.Errorf("exit %d, want 1", code)
	}
	t.Logf("onceq worker:\n%s", out)
	if topics := listTopics(t, conn); len(topics) != 2 {
		t.Errorf("topics: %v", topics)
	}
}

// waitOutputs waits until topic holds at least n committed records,
// failing the test after a minute or when p exits.
func waitOutputs(t *testing.T, conn broker.Conn, topic string, n int, p *testutil.Process) {
	t.Helper()
	got := 0
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && !p.Exited(); time.Sleep(200 * time.Millisecond) {
		if got = len(testutil.ReadCommitted(t, conn, 30*time.Second, topic)); got >= n {
			return
		}
	}
	t.Fatalf("%s holds %d records, want %d; worker output:\n%s", topic, got, n, p.Output())
}
