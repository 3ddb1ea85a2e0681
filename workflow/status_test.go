package workflow_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/workflow"
)

// TestStepsThatNeverRun: the steps a finished workflow never runs show
// skipped, with why, not pending: the rest of a failed chain, the
// callback of a chord with a failed member, and the OnError callback of
// a workflow that succeeded.
func TestStepsThatNeverRun(t *testing.T) {
	var runs sync.Map
	e := run(t, appender(&runs), "steps", "alerts")
	alert := workflow.Task(onceq.Task{Queue: "alerts", ID: "alert-ok"})
	ok := e.submit(t, "fine", workflow.Chain(task("steps", "a"), task("steps", "b")).OnError(alert))
	broken := e.submit(t, "broken", workflow.Chain(task("steps", "a"), task("steps", "fail"), task("steps", "never"),
		workflow.Chord(workflow.Group(task("steps", "x")), task("steps", "cb"))))
	chord := e.submit(t, "chord", workflow.Chord(workflow.Group(task("steps", "fail"), task("steps", "y")), task("steps", "cb")))

	check := func(what string, s *workflow.Step, want string) {
		t.Helper()
		if s.State != workflow.StateSkipped || !strings.Contains(s.Reason, want) || s.Record != nil {
			t.Errorf("%s: %s %q, want skipped %q", what, s.State, s.Reason, want)
		}
	}
	st := e.wait(t, ok)
	if st.State != workflow.StateSucceeded {
		t.Fatalf("fine: %s %s", st.State, st.Reason)
	}
	check("the OnError callback of a workflow that succeeded", &st.Root.OnError[0], "OnError callback, and the step succeeded")

	st = e.wait(t, broken)
	if st.State != workflow.StateFailed {
		t.Fatalf("broken: %s", st.State)
	}
	check("the step after the failed one", &st.Root.Steps[2], "step 1 failed before it")
	check("a member of a chord after the failed step", &st.Root.Steps[3].Steps[0], "step 1 failed before it")
	check("a callback after the failed step", st.Root.Steps[3].Callback, "step 1 failed before it")

	st = e.wait(t, chord)
	if st.State != workflow.StateFailed {
		t.Fatalf("chord: %s", st.State)
	}
	check("the callback of a chord with a failed member", st.Root.Callback, "a member of the chord failed")
	var b strings.Builder
	if err := workflow.WriteStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "skipped: not run: a member of the chord failed") {
		t.Errorf("the printed status does not say why the callback is skipped:\n%s", b.String())
	}
}
