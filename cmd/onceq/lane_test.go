package main

import (
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testutil"
)

// TestLaneQueuesFromTheCLI: onceq produce writes tasks of lane queues to
// their lane, and onceq worker given a pattern of the lane's labels runs
// them, each once, two queues with one ID included; a lane queue without
// a label is refused, exit 2, with nothing written.
func TestLaneQueuesFromTheCLI(t *testing.T) {
	addr, conn := produceBroker(t)
	testutil.CreateTopic(t, conn, "out", 1)
	cli := cliOn(t, addr)
	for _, q := range []string{"fn/resize", "fn/mail", "fn/other"} {
		cli("produce", "--queue", q, "--id", "a1", "--create-queues", "2", "hi")
	}
	if code, out, stderr := runCLI(t, "", "--brokers", addr, "produce", "--queue", "fn/", "--id", "a2", "hi"); code != 2 || !strings.Contains(stderr, "label") {
		t.Fatalf("produce --queue fn/: exit %d: %s%s", code, out, stderr)
	}
	w := testutil.Start(t, "worker", "--brokers", addr, "--queue", "fn/(resize|mail)", "--handler", "count:out",
		"--checkpoint-dir", t.TempDir(), "--metrics-addr", "")
	defer w.Kill()
	deadline := time.Now().Add(time.Minute)
	for {
		recs := testutil.ReadCommitted(t, conn, 20*time.Second, "out")
		if len(recs) == 2 {
			break
		}
		if len(recs) > 2 || time.Now().After(deadline) {
			t.Fatalf("%d outputs, want 2 (fn/resize and fn/mail, not fn/other)\n%s", len(recs), w.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if recs := testutil.ReadCommitted(t, conn, 20*time.Second, "fn"); len(recs) != 3 {
		t.Fatalf("the lane fn holds %d tasks, want 3", len(recs))
	}
	// Stats and limits take lane queues; a lane queue without a label
	// is refused.
	for deadline := time.Now().Add(time.Minute); ; {
		out := cli("queue", "stats", "--json", "fn/resize", "fn/mail")
		if strings.Count(out, `"succeeded":1`) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue stats of fn/resize and fn/mail: %s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// fn/other, which no worker consumes, counts its task as pending.
	if out := cli("queue", "stats", "--lane", "fn", "--json"); strings.Count(out, `"queue":`) != 3 || !strings.Contains(out, `"queue":"fn/mail"`) ||
		!strings.Contains(out, `"queue":"fn/resize"`) || !strings.Contains(out, `"queue":"fn/other","paused":false,"tasks":{"pending":1}`) {
		t.Fatalf("queue stats --lane fn: want fn/mail, fn/resize and fn/other's pending task:\n%s", out)
	}
	// The lane's own stats count the lane in total.
	if out := cli("queue", "stats", "fn"); !strings.Contains(out, "lane in total (3 lane queues): pending=1 scheduled=0 running=0 retrying=0 succeeded=2") {
		t.Fatalf("queue stats fn: want the lane in total:\n%s", out)
	}
	if code, out, stderr := runCLI(t, "", "--brokers", addr, "queue", "stats", "--lane", "fn/x"); code != 2 || !strings.Contains(stderr, "--lane") {
		t.Fatalf("queue stats --lane fn/x: exit %d: %s%s", code, out, stderr)
	}
	cli("queue", "limit", "fn/mail", "--rate", "5/s")
	if code, out, stderr := runCLI(t, "", "--brokers", addr, "queue", "limit", "fn/", "--rate", "5/s"); code != 2 || !strings.Contains(stderr, "label") {
		t.Fatalf("queue limit fn/: exit %d: %s%s", code, out, stderr)
	}
}
