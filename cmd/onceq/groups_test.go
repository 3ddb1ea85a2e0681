package main

import (
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testutil"
)

// TestSecondGroupWarns: a worker that joins a queue another group already
// consumes says so, naming the groups; one of the same group does not.
func TestSecondGroupWarns(t *testing.T) {
	addr, conn := produceBroker(t)
	testutil.CreateTopic(t, conn, "out", 2)
	worker := func(group string) *testutil.Process {
		return testutil.Start(t, "worker", "--brokers", addr, "--queue", "jobs", "--group", group, "--handler", "count:out",
			"--checkpoint-dir", t.TempDir(), "--metrics-addr", "")
	}
	first := worker("mailer")
	defer first.Kill()
	first.WaitOutput(t, "worker started|partitions assigned", 30*time.Second)
	if code, out, stderr := runCLI(t, "", "--brokers", addr, "produce", "--queue", "jobs", "--id", "hello-1", "hi"); code != 0 {
		t.Fatalf("produce: %d %s%s", code, out, stderr)
	}
	if code, out, _ := runCLI(t, "", "--brokers", addr, "task", "wait", "jobs", "hello-1", "--timeout", "30s"); code != 0 {
		t.Fatalf("task wait: %d %s", code, out)
	}
	same := worker("mailer")
	defer same.Kill()
	same.WaitOutput(t, "worker started|partitions assigned", 30*time.Second)
	if strings.Contains(same.Output(), "another consumer group") {
		t.Fatalf("a worker of the same group warned:\n%s", same.Output())
	}
	other := worker("onceq")
	defer other.Kill()
	other.WaitOutput(t, `another consumer group already consumes this queue.*queue=jobs.*group=onceq.*other_groups=mailer`, 30*time.Second)
}
