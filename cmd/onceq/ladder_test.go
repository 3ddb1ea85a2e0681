package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// TestOneLadder: the delay ladder is the cluster's. Set once with delay
// ladder set, it is what a worker started without --buckets and a
// delayed task published by produce (which takes no ladder) route by,
// so the task runs; a worker given another ladder is refused, naming the
// command that changes it; no bucket of the default ladder is ever
// created.
func TestOneLadder(t *testing.T) {
	addr, conn := produceBroker(t)
	testutil.CreateTopic(t, conn, "out", 2)
	cli := cliOn(t, addr)
	if out := cli("delay", "ladder"); !strings.Contains(out, "1s 5s 30s 2m 10m 1h 6h 1d (default: none set)") {
		t.Fatalf("delay ladder of a new cluster: %s", out)
	}
	code, _, stderr := runCLI(t, "", "--brokers", addr, "delay", "ladder", "set", "300ms,soon")
	if code != exitUsage || !strings.Contains(stderr, `bucket "soon"`) {
		t.Fatalf("delay ladder set with a bad bucket: exit %d: %s", code, stderr)
	}
	cli("delay", "ladder", "set", "300ms,3s")
	if out := cli("delay", "ladder"); !strings.Contains(out, "300ms 3s (set)") {
		t.Fatalf("delay ladder: %s", out)
	}
	code, _, stderr = runCLI(t, "", "--brokers", addr, "worker", "--queue", "jobs", "--handler", "count:out", "--checkpoint-dir", t.TempDir(),
		"--metrics-addr", "", "--buckets", "1s,5s")
	if code != exitUsage || !strings.Contains(stderr, "the cluster's (onceq-ladder) is 300ms 3s") || !strings.Contains(stderr, "onceq delay ladder set") {
		t.Fatalf("a worker given another ladder: exit %d: %s", code, stderr)
	}
	w := testutil.Start(t, "worker", "--brokers", addr, "--queue", "jobs", "--handler", "count:out", "--checkpoint-dir", t.TempDir(),
		"--metrics-addr", "")
	defer w.Kill()
	w.WaitOutput(t, "delay service started.*300ms 3s", 30*time.Second)
	cli("produce", "--queue", "jobs", "--id", "later-1", "--delay", "2s", "hello")
	if out := cli("task", "wait", "jobs", "later-1", "--timeout", "30s"); !strings.Contains(out, "state     succeeded") {
		t.Fatalf("the delayed task:\n%s", out)
	}
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	details, err := adm.Kadm().ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name := range details {
		if strings.HasPrefix(name, broker.DelayPrefix) && name != "onceq-delay-300ms" && name != "onceq-delay-3s" {
			t.Errorf("bucket topic %s exists outside the cluster's ladder", name)
		}
	}
}
