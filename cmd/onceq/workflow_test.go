package main

import (
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testutil"
)

func TestWorkflowUsageErrorsExit2(t *testing.T) {
	for _, tc := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{"", []string{"workflow", "get"}, "want a workflow ID"},
		{"", []string{"workflow", "get", "a#b"}, "'#' is reserved"},
		{"", []string{"workflow", "wait", "w", "--timeout", "0s"}, "--timeout 0s"},
		{"", []string{"workflow", "cancel"}, "want a workflow ID"},
		{"", []string{"workflow", "cancel", "a#b"}, "'#' is reserved"},
		{`{"chain":[]}` + "\n", []string{"produce", "--queue", "jobs", "--file", "-"}, "line 1: invalid workflow line: chain: an empty list"},
		{`{"queue":"jobs","payload":"a"}` + "\n" + `{"chord":{"group":[{"payload":"a"}],"callback":{"delay":"x"}}}` + "\n",
			[]string{"produce", "--queue", "jobs", "--file", "-", "--tx"}, "line 2: invalid workflow line: onceq: chord.callback.delay"},
		{`{"chain":[{"payload":"a"}]}` + "\n", []string{"produce", "--file", "-"}, `give "queue" on the task or --queue`},
		{`{"id":"x","depends_on":["y"]}` + "\n" + `{"id":"y","depends_on":["x"]}` + "\n", []string{"produce", "--queue", "jobs", "--file", "-", "--tx"},
			"dependency cycle: waits for jobs/y, which waits for jobs/x: nothing of the file was submitted"},
	} {
		code, _, stderr := runCLI(t, tc.stdin, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("onceq %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
}

// TestWorkflowCommands submits a chain, a chord and a task with a
// dependency as JSON lines through onceq produce --file, to a worker
// process (which runs the workflow service), and asks about them with
// workflow wait and get, and task get of the workflow's task.
func TestWorkflowCommands(t *testing.T) {
	addr, conn := produceBroker(t)
	testutil.CreateTopic(t, conn, "out", 2)
	w := testutil.Start(t, "worker", "--brokers", addr, "--queue", "jobs", "--handler", "count:out", "--checkpoint-dir", t.TempDir(),
		"--metrics-addr", "", "--buckets", "100ms,1s")
	defer w.Kill()
	w.WaitOutput(t, "worker started", 30*time.Second)
	lines := strings.Join([]string{
		`{"id":"wf-chain","chain":[{"id":"c0","payload":"a"},{"id":"c1","payload":"b"}]}`,
		`{"id":"wf-chord","chord":{"group":[{"id":"m0"},{"id":"m1"}],"callback":{"id":"cb"}}}`,
		`{"id":"after","payload":"x","depends_on":["before"]}`,
		`{"id":"before","payload":"y"}`,
	}, "\n") + "\n"
	code, out, stderr := runCLI(t, lines, "--brokers", addr, "produce", "--queue", "jobs", "--file", "-")
	if code != 0 {
		t.Fatalf("produce: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"wf-chain onceq-workflow/", "wf-chord onceq-workflow/", "jobs/after onceq-workflow/", "before jobs/"} {
		if !strings.Contains(out, want) {
			t.Fatalf("receipts %q lack %q", out, want)
		}
	}
	code, out, stderr = runCLI(t, "", "--brokers", addr, "workflow", "wait", "wf-chord", "--timeout", "60s")
	if code != 0 || !strings.Contains(out, "state     succeeded") || !strings.Contains(out, "callback  task jobs/cb") {
		t.Fatalf("workflow wait wf-chord: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = runCLI(t, "", "--brokers", addr, "workflow", "wait", "jobs/after", "--timeout", "60s")
	if code != 0 || !strings.Contains(out, "task jobs/after") {
		t.Fatalf("workflow wait jobs/after: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = runCLI(t, "", "--brokers", addr, "task", "get", "onceq-workflow", "wf-chain", "--timeout", "60s")
	if code != 0 || !strings.Contains(out, "workflow  wf-chain") || !strings.Contains(out, "0  task jobs/c0") {
		t.Fatalf("task get onceq-workflow wf-chain: exit %d\n%s%s", code, out, stderr)
	}
	code, out, _ = runCLI(t, "", "--brokers", addr, "workflow", "get", "wf-chain", "--json")
	if code != 0 || !strings.HasPrefix(out, `{"id":"wf-chain","state":`) || !strings.Contains(out, `"kind":"chain"`) {
		t.Fatalf("workflow get --json: exit %d\n%s", code, out)
	}
	code, _, stderr = runCLI(t, "", "--brokers", addr, "workflow", "get", "never-submitted")
	if code != exitFailure || !strings.Contains(stderr, "no record of the task") {
		t.Fatalf("workflow get of an unknown ID: exit %d: %s", code, stderr)
	}

	// Cancel: a workflow waiting for a task never submitted ends failed,
	// canceled, without running; a done one is left as it is.
	if code, _, stderr = runCLI(t, `{"id":"ship","payload":"z","depends_on":["pay"]}`+"\n", "--brokers", addr, "produce", "--queue", "jobs", "--file", "-"); code != 0 {
		t.Fatalf("produce: exit %d: %s", code, stderr)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, out, _ = runCLI(t, "", "--brokers", addr, "workflow", "get", "jobs/ship")
		if strings.Contains(out, "state     waiting") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobs/ship never waited:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	code, out, stderr = runCLI(t, "", "--brokers", addr, "workflow", "cancel", "jobs/ship")
	if code != 0 || out != "workflow jobs/ship canceled: it will not start\n" {
		t.Fatalf("workflow cancel jobs/ship: exit %d\n%s%s", code, out, stderr)
	}
	code, out, _ = runCLI(t, "", "--brokers", addr, "workflow", "wait", "jobs/ship", "--timeout", "60s")
	if code != exitFailure || !strings.Contains(out, "state     failed") || !strings.Contains(out, "canceled") {
		t.Fatalf("workflow wait of the canceled jobs/ship: exit %d\n%s", code, out)
	}
	code, out, stderr = runCLI(t, "", "--brokers", addr, "workflow", "cancel", "wf-chord")
	if code != 0 || out != "workflow wf-chord already succeeded: nothing to cancel\n" {
		t.Fatalf("workflow cancel of the done wf-chord: exit %d\n%s%s", code, out, stderr)
	}
	// Submitted again, a known workflow says so, in its state, with the
	// way on for a failed one; nothing is submitted; retry names the way.
	again := `{"id":"wf-chord","chord":{"group":[{"id":"m0"}],"callback":{"id":"cb"}}}` + "\n" + `{"id":"ship","payload":"z","depends_on":["pay"]}` + "\n"
	for _, tx := range []string{"--tx=false", "--tx=true"} {
		code, out, stderr = runCLI(t, again, "--brokers", addr, "produce", "--queue", "jobs", "--file", "-", tx)
		if code != 0 || !strings.Contains(out, "wf-chord known, in state succeeded") ||
			!strings.Contains(out, "jobs/ship known, in state failed") || !strings.Contains(out, "submit it again under a new ID") {
			t.Fatalf("produce %s of known workflows: exit %d\n%s%s", tx, code, out, stderr)
		}
	}
	code, _, stderr = runCLI(t, "", "--brokers", addr, "workflow", "retry", "jobs/ship")
	if code != exitFailure || !strings.Contains(stderr, "cannot be retried") || !strings.Contains(stderr, "under a new ID") {
		t.Fatalf("workflow retry of a canceled workflow: exit %d: %s", code, stderr)
	}
}
