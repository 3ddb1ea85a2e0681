package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/handlers"
	"github.com/onceq/onceq/internal/testutil"
)

// TestWorkerShutdownCancelsSlowTask: an "onceq worker" process with
// --shutdown-timeout 2s gets SIGTERM while a task sleeps for 30 s (its
// "sleep" header). It exits within 10 s with code 1, saying that it
// canceled one task and that it runs again on restart; the task left no
// output, no retry and no dead letter. A worker restarted on the same
// checkpoint dir runs it once. (The restart is the count: handler without
// its sleep, in-process: the question is whether the task runs again, and
// once, not how long it sleeps.)
func TestWorkerShutdownCancelsSlowTask(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	testutil.CreateTopic(t, conn, "out", 1)
	cl, err := conn.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, task := range []onceq.Task{
		{ID: "slow", Queue: "in", Headers: []onceq.Header{{Key: handlers.SleepHeader, Value: []byte("30s")}}},
		{ID: "fast", Queue: "in"},
	} {
		task.Resolve(time.Now())
		if err := cl.ProduceSync(t.Context(), task.Record("in")).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	dir := filepath.Join(t.TempDir(), "worker")
	p := testutil.Start(t, "worker", "--brokers", conn.Brokers[0], "--group", "stop", "--queue", "in", "--handler", "count:out",
		"--checkpoint-dir", dir, "--metrics-addr", "", "--shutdown-timeout", "2s", "--commit-interval", "50ms")
	// The fast task's output is committed while the slow one sleeps.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if recs, _ := testutil.ReadCommittedErr(conn, 10*time.Second, "out"); len(recs) == 1 {
			break
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("no output of the fast task:\n%s", p.Output())
		}
	}
	time.Sleep(200 * time.Millisecond)
	p.Signal(syscall.SIGTERM)
	start := time.Now()
	code, err := p.Wait(20 * time.Second)
	took := time.Since(start)
	t.Logf("exit %d %v after SIGTERM (shutdown timeout 2s)", code, took.Round(time.Millisecond))
	if err != nil || took > 10*time.Second {
		t.Fatalf("still running %v after SIGTERM with --shutdown-timeout 2s (%v):\n%s", took, err, p.Output())
	}
	out := p.Output()
	if code != exitFailure || !regexp.MustCompile(`canceled tasks still running at the shutdown timeout.* count=1\b`).MatchString(out) ||
		!strings.Contains(out, "onceq: consumer: tasks canceled at the shutdown timeout: 1") || !strings.Contains(out, "they run again on restart") {
		t.Fatalf("exit %d; want 1, a log of 1 canceled task and an error saying it runs again on restart:\n%s", code, out)
	}
	outs := taskIDs(t, testutil.ReadCommitted(t, conn, 10*time.Second, "out"))
	if fmt.Sprint(outs) != "[fast]" {
		t.Fatalf("outputs %v after the shutdown, want only fast: the canceled task left a result", outs)
	}
	written := append([]string{broker.DLQTopic("in")}, delay.DefaultPlanner().Topics()...)
	if recs := taskIDs(t, testutil.ReadCommitted(t, conn, 10*time.Second, written...)); len(recs) != 0 {
		t.Fatalf("records %v in the dead letters or the delay buckets: the canceled run counted as a failure", recs)
	}

	w, err := consumer.New(consumer.Conn(conn), consumer.Group("stop"), consumer.Queues("in"), consumer.CheckpointDir(dir),
		consumer.WithHandler(handlers.Count("out")), consumer.CommitInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	waitFor(t, "the slow task's output after the restart", func() bool {
		recs, _ := testutil.ReadCommittedErr(conn, 10*time.Second, "out")
		return len(recs) >= 2
	})
	time.Sleep(500 * time.Millisecond) // a duplicate would land after the first
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var runs []string
	for _, r := range testutil.ReadCommitted(t, conn, 10*time.Second, "out") {
		task, err := onceq.FromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range task.Headers {
			if h.Key == handlers.RunsHeader {
				runs = append(runs, task.ID+"="+string(h.Value))
			}
		}
	}
	if fmt.Sprint(runs) != "[fast=1 slow=1]" {
		t.Fatalf("outputs with their run counts %v, want [fast=1 slow=1]", runs)
	}
}

// taskIDs returns the task IDs of recs, in order.
func taskIDs(t *testing.T, recs []*kgo.Record) []string {
	t.Helper()
	var out []string
	for _, r := range recs {
		task, err := onceq.FromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, task.ID)
	}
	return out
}

// TestWorkerProbes: a worker's /readyz answers 200 once it joined and
// restored its partitions, its /healthz 200 while it reaches the broker
// and 503 once the broker is gone (it answered ok regardless); with
// --pprof, Go's profiles too.
func TestWorkerProbes(t *testing.T) {
	testutil.NeedsEmbedded(t, "closes the broker under a running worker")
	emb, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	testutil.CreateTopic(t, conn, "out", 1)
	addr := testutil.FreeAddr(t)
	w := testutil.Start(t, "worker", "--brokers", conn.Brokers[0], "--group", "probes", "--queue", "in", "--handler", "copy:out",
		"--checkpoint-dir", filepath.Join(t.TempDir(), "w"), "--metrics-addr", addr, "--pprof", "--log-level", "error",
		"--session-timeout", "6s", "--transaction-timeout", "5s")
	defer w.Kill()
	status := func(path string) int {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	cl, err := conn.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	task := onceq.Task{ID: "t", Queue: "in"}
	if err := cl.ProduceSync(t.Context(), task.Record("in")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitStatus := func(path string, want int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for status(path) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s answers %d, want %d\n%s", path, status(path), want, w.Output())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitStatus("/readyz", http.StatusOK)
	waitStatus("/healthz", http.StatusOK)
	waitStatus("/debug/pprof/goroutine", http.StatusOK) // --pprof
	emb.Close()
	waitStatus("/healthz", http.StatusServiceUnavailable)
}
