package workflow_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/workflow"
)

// TestCycleAcrossSubmissions: A waits for B, and B, submitted apart, for
// A: neither could ever start. Both end failed, and neither task runs; a
// chain waiting for a task of a workflow that waits for it is found
// through its derived step ID too. Of each pair, the first to look finds
// the cycle; the other finds the cycle too, or that its dependency was
// canceled or skipped by the first's failure, whichever it looks at last.
func TestCycleAcrossSubmissions(t *testing.T) {
	var runs sync.Map
	e := run(t, appender(&runs), "steps")
	a := e.submit(t, "", workflow.Task(onceq.Task{Queue: "steps", ID: "a"}).After(workflow.Ref{Queue: "steps", ID: "b"}))
	b := e.submit(t, "", workflow.Task(onceq.Task{Queue: "steps", ID: "b"}).After(workflow.Ref{Queue: "steps", ID: "a"}))
	c := e.submit(t, "wf-c", workflow.Chain(task("steps", "c0"), task("steps", "c1")).After(workflow.Ref{Queue: "steps", ID: "wf-d/1"}))
	d := e.submit(t, "wf-d", workflow.Chain(task("steps", "d0"), task("steps", "d1")).After(workflow.Ref{Queue: "steps", ID: "wf-c/0"}))
	for _, pair := range [][2]string{{a, b}, {c, d}} {
		cycle := 0
		for _, id := range pair {
			st := e.wait(t, id)
			t.Logf("%s: %s", id, st.Reason)
			if strings.Contains(st.Reason, "dependency cycle") {
				cycle++
			}
			if st.State != workflow.StateFailed || !strings.Contains(st.Reason, "dependency cycle") &&
				!strings.Contains(st.Reason, "ended canceled") && !strings.Contains(st.Reason, "never runs") {
				t.Errorf("workflow %s: %s %q, want failed by the cycle", id, st.State, st.Reason)
			}
		}
		if cycle == 0 {
			t.Errorf("workflows %s and %s: neither failed naming the cycle", pair[0], pair[1])
		}
	}
	runs.Range(func(k, _ any) bool {
		t.Errorf("task %s of a cycle ran", k)
		return true
	})
}

// TestDependencyOnASkippedStep: a workflow that waits for a step its own
// workflow skips (the rest of a failed chain) ends failed, the reason
// naming the skip, and its tasks never run; waiting would be forever.
func TestDependencyOnASkippedStep(t *testing.T) {
	var runs sync.Map
	e := run(t, appender(&runs), "steps")
	broken := e.submit(t, "broken-chain", workflow.Chain(task("steps", "fail"), task("steps", "never")))
	if st := e.wait(t, broken); st.State != workflow.StateFailed {
		t.Fatalf("the chain ended %s, want failed", st.State)
	}
	after := e.submit(t, "after-skipped", workflow.Task(onceq.Task{Queue: "steps", ID: "after"}).After(workflow.Ref{Queue: "steps", ID: broken + "/1"}))
	st := e.wait(t, after)
	if st.State != workflow.StateFailed || !strings.Contains(st.Reason, "never runs: workflow broken-chain skips it") {
		t.Fatalf("the workflow waiting for a skipped step: %s %q, want failed, never runs", st.State, st.Reason)
	}
	if _, ran := runs.Load("steps/after"); ran {
		t.Fatal("the task waiting for a skipped step ran")
	}
}
