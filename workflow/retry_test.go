package workflow_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/workflow"
)

// TestRetryAndKnownIDs: a workflow submitted again under a known ID says
// so, in its state, with the way on; one that failed before it started (a
// missing queue) runs again with Retry once the queue exists; one that
// failed at a step is refused, naming the way: a new ID.
func TestRetryAndKnownIDs(t *testing.T) {
	var runs sync.Map
	e := run(t, appender(&runs), "steps")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := workflow.Chain(task("steps", "a"), task("later", "b"))
	start, err := workflow.Prepare("late", n, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Submit(ctx, start); err != nil { // unchecked: the queue "later" does not exist
		t.Fatal(err)
	}
	if st := e.wait(t, "late"); st.State != workflow.StateFailed || !strings.Contains(st.Reason, "onceq workflow retry late") {
		t.Fatalf("got %s %q, want failed, naming workflow retry", st.State, st.Reason)
	}
	first, err := e.in.Get(ctx, onceq.WorkflowQueue, "late")
	if err != nil {
		t.Fatal(err)
	}
	testutil.CreateTopic(t, e.conn, "later", 2)
	sub, err := workflow.SubmitUnique(ctx, e.ctl, e.p, "late", n)
	if err != nil || sub.New || !strings.Contains(sub.Known(), "known, in state failed") || !strings.Contains(sub.Known(), "retry it with onceq workflow retry late") {
		t.Fatalf("a known failed ID submitted again: %+v %q, %v", sub, sub.Known(), err)
	}
	if _, err := workflow.Retry(ctx, e.in, e.p, e.conn, "late"); err != nil {
		t.Fatal(err)
	}
	// The start task's next final record is the retry's.
	r, err := e.in.WaitFor(ctx, onceq.WorkflowQueue, "late", func(r onceq.TaskRecord) bool { return r.Offset != first.Offset })
	if err != nil || r.State != onceq.StateSucceeded {
		t.Fatalf("the retried start task: %+v, %v", r, err)
	}
	// Its first step runs; its second waits in "later", which no worker
	// of this test reads.
	if r, err := e.in.Wait(ctx, "steps", "late/0"); err != nil || r.State != onceq.StateSucceeded {
		t.Fatalf("the retried workflow's first step: %+v, %v", r, err)
	}
	if st, err := workflow.Get(ctx, e.in, "late"); err != nil || st.State != workflow.StateRunning {
		t.Fatalf("the retried workflow: %s %q, %v; want running", st.State, st.Reason, err)
	}

	// Failed at a step: refused, naming a new ID.
	id := e.submit(t, "broken", workflow.Chain(task("steps", "fail"), task("steps", "never")))
	if st := e.wait(t, id); st.State != workflow.StateFailed {
		t.Fatalf("broken: %s", st.State)
	}
	_, err = workflow.Retry(ctx, e.in, e.p, e.conn, id)
	if !errors.Is(err, workflow.ErrNotRetryable) || !strings.Contains(err.Error(), "under a new ID") {
		t.Fatalf("Retry of a workflow failed at a step: %v", err)
	}
	_, err = workflow.Retry(ctx, e.in, e.p, e.conn, "late")
	if !errors.Is(err, workflow.ErrNotRetryable) || !strings.Contains(err.Error(), "only a failed workflow") {
		t.Fatalf("Retry of a running workflow: %v", err)
	}
}
