package workflow_test

import (
	"sync"
	"testing"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/workflow"
)

// TestLaneSteps runs a workflow whose steps are in lane queues of one
// lane and in the lane's own queue, and one that depends on a lane
// queue's task: each step runs once, in its queue, and the dependency is
// found in its lane queue's records.
func TestLaneSteps(t *testing.T) {
	var runs sync.Map
	e := run(t, appender(&runs), "fn/a", "fn/b", "fn")
	wf := e.submit(t, "lanes-1", workflow.Chain(task("fn/a", "a"),
		workflow.Chord(workflow.Group(task("fn/b", "x"), task("fn", "y")), task("fn/a", "cb"))))
	st := e.wait(t, wf)
	if want := "a,x+a,y,cb"; st.State != workflow.StateSucceeded || string(st.Output) != want {
		t.Fatalf("workflow: %s %q, want succeeded %q", st.State, st.Output, want)
	}
	for _, k := range []string{"fn/a/lanes-1/0", "fn/b/lanes-1/1/0", "fn/lanes-1/1/1", "fn/a/lanes-1/1/cb"} {
		if n, ok := runs.Load(k); !ok || *n.(*int) != 1 {
			t.Errorf("%s: ran %v times, want once", k, n)
		}
	}
	after := e.submit(t, "after-1", workflow.Task(onceq.Task{Queue: "fn/b", Payload: []byte("then")}).After(workflow.Ref{Queue: "fn/a", ID: wf + "/1/cb"}))
	if st := e.wait(t, after); st.State != workflow.StateSucceeded {
		t.Fatalf("workflow after a lane queue's task: %+v", st)
	}
}
