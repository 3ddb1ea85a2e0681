package workflow_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/workflow"
)

// TestTraceThroughWorkflow submits a chain of two steps inside a span,
// with the OpenTelemetry SDK's in-memory exporter as the global provider.
// The first step fails its first attempt and comes back through the delay
// buckets. Every run's handler must see a span of the submitter's trace,
// the retry must be a sibling of the failed attempt, and the second step
// a child of the first step's successful run.
func TestTraceThroughWorkflow(t *testing.T) {
	tp, exp := testutil.Tracing(t)

	type seen struct {
		payload string
		attempt int
		span    trace.SpanContext
	}
	var (
		mu   sync.Mutex
		runs []seen
	)
	e := run(t, consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
		mu.Lock()
		runs = append(runs, seen{string(task.Payload), task.Attempt, trace.SpanContextFromContext(ctx)})
		mu.Unlock()
		if string(task.Payload) == "a" && task.Attempt == 1 {
			return errors.New("the first attempt fails")
		}
		return task.SetResult(task.Payload)
	}), "traced")

	ctx, root := tp.Tracer("test").Start(context.Background(), "client")
	id, err := workflow.Submit(ctx, e.p, "wf-traced", workflow.Chain(task("traced", "a"), task("traced", "b")))
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	if st := e.wait(t, id); st.State != workflow.StateSucceeded {
		t.Fatalf("workflow %s: %s", id, st.State)
	}
	want := root.SpanContext().TraceID()

	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 3 {
		t.Fatalf("runs %+v: want a's two attempts and b", runs)
	}
	// A run's commit span ends just after its commit, which the
	// workflow's state may show first: wait for the three.
	var spans []sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		spans = exp.GetSpans().Snapshots()
		n := 0
		for _, s := range spans {
			if s.Name() == "onceq commit traced" {
				n++
			}
		}
		if n >= 3 || time.Now().After(deadline) {
			break
		}
	}
	runSpans := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		if s.SpanContext().TraceID() != want {
			t.Errorf("span %q in trace %s, want the submitter's %s", s.Name(), s.SpanContext().TraceID(), want)
		}
		runSpans[s.SpanContext().SpanID()] = s
	}
	var a1, a2, b sdktrace.ReadOnlySpan
	for _, r := range runs {
		if r.span.TraceID() != want {
			t.Fatalf("run of %s (attempt %d) in trace %s, want %s", r.payload, r.attempt, r.span.TraceID(), want)
		}
		s := runSpans[r.span.SpanID()]
		if s == nil || s.Name() != "onceq run traced" {
			t.Fatalf("run of %s (attempt %d): its handler's span %v was not exported as onceq run traced", r.payload, r.attempt, r.span.SpanID())
		}
		switch {
		case r.payload == "a" && r.attempt == 1:
			a1 = s
		case r.payload == "a" && r.attempt == 2:
			a2 = s
		case r.payload == "b":
			b = s
		}
	}
	if a1 == nil || a2 == nil || b == nil {
		t.Fatalf("runs %+v: want a twice and b once", runs)
	}
	if a1.Parent().SpanID() != a2.Parent().SpanID() || a1.Status().Code.String() != "Error" {
		t.Errorf("a's attempts: parents %s and %s, first status %v: want one parent and an error", a1.Parent().SpanID(), a2.Parent().SpanID(), a1.Status())
	}
	commits := 0
	for _, s := range runSpans {
		if s.Name() == "onceq commit traced" {
			commits++
			if p := s.Parent().SpanID(); p != a1.SpanContext().SpanID() && p != a2.SpanContext().SpanID() && p != b.SpanContext().SpanID() {
				t.Errorf("a commit span's parent %s is none of the runs", p)
			}
		}
	}
	if commits != 3 {
		t.Errorf("%d commit spans, want one for each of the three runs", commits)
	}
	if b.Parent().SpanID() != a2.SpanContext().SpanID() {
		t.Errorf("b's parent %s, want a's successful run %s", b.Parent().SpanID(), a2.SpanContext().SpanID())
	}
	names := map[string]int{}
	for _, s := range runSpans {
		names[s.Name()]++
	}
	for _, n := range []string{"client", "onceq submit transaction", "onceq wait traced", "onceq run " + onceq.WorkflowQueue, "onceq commit traced"} {
		if names[n] == 0 {
			t.Errorf("no %q span among %v", n, names)
		}
	}
}
