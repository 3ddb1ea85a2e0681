package workflow_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/control"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/internal/ctltopic"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
	"github.com/onceq/onceq/workflow"
)

// testLadder is the delay ladder of the tests: dependency checks and
// retries come back fast.
var testLadder = func() *delay.Planner {
	p, err := delay.NewPlanner([]time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second})
	if err != nil {
		panic(err)
	}
	return p
}()

// env is a broker with a worker of the steps queues, the workflow service
// and a delay service, a producer and an inspector.
type env struct {
	conn broker.Conn
	p    *producer.Producer
	in   *inspect.Inspector
	ctl  *control.Controller
}

// run starts everything; h handles the tasks of the queues.
func run(t *testing.T, h consumer.Handler, queues ...string) *env {
	t.Helper()
	return startEnv(t, h, 4, queues, consumer.NoSync())
}

// startEnv runs a broker with the queues, of partitions each, a worker of
// them (the opts after the env's own), the workflow service and a delay
// service, all on testLadder, until the test ends.
func startEnv(tb testing.TB, h consumer.Handler, partitions int32, queues []string, opts ...consumer.Opt) *env {
	tb.Helper()
	_, conn := testutil.StartBroker(tb, "")
	made := map[string]bool{}
	for _, q := range queues {
		if topic := onceq.QueueTopic(q); !made[topic] { // a lane queue's lane
			testutil.CreateTopic(tb, conn, topic, partitions)
			made[topic] = true
		}
	}
	// Made before the cleanup below, so removed after everything stopped.
	workerDir, serviceDir, delayDir := tb.TempDir(), tb.TempDir(), tb.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	tb.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	start := func(name string, run func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx); err != nil && ctx.Err() == nil {
				tb.Errorf("%s: %v", name, err)
			}
		}()
	}
	opts = append([]consumer.Opt{consumer.Conn(conn), consumer.Group("steps"), consumer.Queues(queues...), consumer.CheckpointDir(workerDir),
		consumer.WithHandler(h), consumer.Planner(testLadder), consumer.Backoff(50*time.Millisecond, 2, 200*time.Millisecond),
		consumer.CommitInterval(10 * time.Millisecond)}, opts...)
	w, err := consumer.New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	start("worker", w.Run)
	svc, err := workflow.NewService(workflow.Conn(conn), workflow.Dir(serviceDir), workflow.Planner(testLadder),
		workflow.WorkerOpts(consumer.NoSync()))
	if err != nil {
		tb.Fatal(err)
	}
	start("workflow service", svc.Run)
	ds, err := delay.NewService(delay.Conn(conn), delay.WithPlanner(testLadder), delay.StateDir(delayDir), delay.CommitInterval(10*time.Millisecond))
	if err != nil {
		tb.Fatal(err)
	}
	start("delay service", ds.Run)
	p, err := producer.New(producer.Conn(conn), producer.Planner(testLadder), producer.Linger(time.Millisecond))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	in, err := inspect.Open(inspect.Conn(conn))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { in.Close() })
	return &env{conn: conn, p: p, in: in, ctl: control.New(in)}
}

// wait waits for workflow id to finish.
func (e *env) wait(t *testing.T, id string) workflow.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := workflow.Wait(ctx, e.in, id)
	if err != nil {
		t.Fatalf("waiting for workflow %s: %v (last status %+v)", id, err, st)
	}
	return st
}

func (e *env) submit(t *testing.T, id string, n workflow.Node) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := workflow.Submit(ctx, e.p, id, n)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// appender returns its input with its payload appended ("a" then "a,b");
// a chord callback's input (the members' results) joined with "+"; a
// payload "fail" fails for good.
func appender(runs *sync.Map) consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		n, _ := runs.LoadOrStore(t.Queue+"/"+t.ID, new(int))
		*n.(*int)++
		p := string(t.Payload)
		if p == "fail" {
			return consumer.SkipRetry(errors.New("told to fail"))
		}
		in := string(t.Input)
		if strings.HasPrefix(in, "[") {
			rs, err := workflow.Results(t.Input)
			if err != nil {
				return consumer.SkipRetry(err)
			}
			parts := make([]string, len(rs))
			for i, r := range rs {
				parts[i] = string(r)
			}
			in = strings.Join(parts, "+")
		}
		if in != "" && p != "" {
			in += ","
		}
		return t.SetResult([]byte(in + p))
	})
}

func task(q, payload string) workflow.Node {
	return workflow.Task(onceq.Task{Queue: q, Payload: []byte(payload)})
}

func TestChainGroupChord(t *testing.T) {
	var runs sync.Map
	e := run(t, appender(&runs), "steps")
	chain := e.submit(t, "chain-1", workflow.Chain(task("steps", "a"), task("steps", "b"), task("steps", "c")))
	chord := e.submit(t, "chord-1", workflow.Chord(workflow.Group(task("steps", "x"), task("steps", "y"), task("steps", "z")), task("steps", "cb")))
	nested := e.submit(t, "", workflow.Chain(task("steps", "first"),
		workflow.Chord(workflow.Group(task("steps", "m0"), workflow.Chain(task("steps", "m1"), task("steps", "m1b"))), task("steps", "joined")),
		task("steps", "last")))

	if st := e.wait(t, chain); st.State != workflow.StateSucceeded || string(st.Output) != "a,b,c" {
		t.Fatalf("chain: %s %q, want succeeded \"a,b,c\"", st.State, st.Output)
	}
	if st := e.wait(t, chord); st.State != workflow.StateSucceeded || string(st.Output) != "x+y+z,cb" {
		t.Fatalf("chord: %s %q, want succeeded \"x+y+z,cb\"", st.State, st.Output)
	}
	st := e.wait(t, nested)
	if want := "first,m0+first,m1,m1b,joined,last"; st.State != workflow.StateSucceeded || string(st.Output) != want {
		t.Fatalf("nested: %s %q, want succeeded %q", st.State, st.Output, want)
	}
	if len(st.Root.Steps) != 3 || st.Root.Steps[1].Kind != "chord" || st.Root.Steps[1].Callback.ID != nested+"/1/cb" {
		t.Fatalf("nested shape: %+v", st.Root)
	}
	runs.Range(func(k, v any) bool {
		if *v.(*int) != 1 {
			t.Errorf("task %s ran %d times", k, *v.(*int))
		}
		return true
	})
	// Submitted again: nothing runs again.
	e.submit(t, "chain-1", workflow.Chain(task("steps", "a"), task("steps", "b"), task("steps", "c")))
	time.Sleep(500 * time.Millisecond)
	if n, _ := runs.Load("steps/chain-1/0"); *n.(*int) != 1 {
		t.Fatalf("the first step of a resubmitted chain ran %d times", *n.(*int))
	}
}

func TestFailureStopsAndCallsBack(t *testing.T) {
	var runs sync.Map
	e := run(t, appender(&runs), "steps", "alerts")
	alert := workflow.Task(onceq.Task{Queue: "alerts", ID: "alert-1"})
	id := e.submit(t, "broken", workflow.Chain(task("steps", "a"), task("steps", "fail"), task("steps", "never")).OnError(alert))
	st := e.wait(t, id)
	if st.State != workflow.StateFailed || !strings.Contains(st.Reason, "step 1 (task steps/broken/1) dead") {
		t.Fatalf("got %s %q, want failed at step 1", st.State, st.Reason)
	}
	if _, ran := runs.Load("steps/broken/2"); ran {
		t.Fatal("the step after the failed one ran")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, err := e.in.Wait(ctx, "alerts", "alert-1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != onceq.StateSucceeded {
		t.Fatalf("the OnError callback ended %s", rec.State)
	}
	if !strings.Contains(string(rec.Result), `"id":"broken/1"`) || !strings.Contains(string(rec.Result), `"workflow":"broken"`) {
		t.Fatalf("the OnError callback's input was %s", rec.Result)
	}
}

func TestDependencies(t *testing.T) {
	var runs sync.Map
	e := run(t, appender(&runs), "steps")
	// B is submitted before A, which it waits for.
	b := e.submit(t, "", workflow.Task(onceq.Task{Queue: "steps", ID: "B", Payload: []byte("b")}).After(workflow.Ref{Queue: "steps", ID: "A"}))
	if b != "steps/B" {
		t.Fatalf("the workflow of task B is %q, want steps/B", b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The service saw B and found A missing: B waits (pending until then).
	st, err := workflow.Get(ctx, e.in, b)
	for err == nil && st.State == workflow.StatePending && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
		st, err = workflow.Get(ctx, e.in, b)
	}
	if err != nil || st.State != workflow.StateWaiting || !strings.Contains(st.Reason, "steps/A") {
		t.Fatalf("before A: %+v %v, want waiting for steps/A", st, err)
	}
	if st.Root == nil || st.Root.ID != "B" || st.Root.State != workflow.StatePending {
		t.Fatalf("a waiting workflow's steps: %+v, want task B pending", st.Root)
	}
	if _, ran := runs.Load("steps/B"); ran {
		t.Fatal("B ran before A")
	}
	if _, err := e.p.Submit(ctx, onceq.Task{Queue: "steps", ID: "A", Payload: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	if st := e.wait(t, b); st.State != workflow.StateSucceeded || string(st.Output) != "b" {
		t.Fatalf("B: %s %q", st.State, st.Output)
	}
	a, err := e.in.Get(ctx, "steps", "A")
	if err != nil {
		t.Fatal(err)
	}
	bRec, err := e.in.Get(ctx, "steps", "B")
	if err != nil {
		t.Fatal(err)
	}
	if bRec.Started.Before(a.Finished) {
		t.Fatalf("B started at %v, before A finished at %v", bRec.Started, a.Finished)
	}
	// A dependency that dies cancels the task that waits for it.
	if _, err := e.p.Submit(ctx, onceq.Task{Queue: "steps", ID: "D", Payload: []byte("fail")}); err != nil {
		t.Fatal(err)
	}
	c := e.submit(t, "", workflow.Task(onceq.Task{Queue: "steps", ID: "C"}).After(workflow.Ref{Queue: "steps", ID: "D"}))
	st = e.wait(t, c)
	if st.State != workflow.StateFailed || !strings.Contains(st.Reason, "canceled") || !strings.Contains(st.Reason, "dependency steps/D ended dead") {
		t.Fatalf("C: %s %q, want failed: canceled: dependency steps/D ended dead", st.State, st.Reason)
	}
	if _, ran := runs.Load("steps/C"); ran {
		t.Fatal("C ran though its dependency died")
	}
}

func TestSubmitRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		id   string
		n    workflow.Node
		want string
	}{
		{"empty node", "w", workflow.Node{}, "empty Node"},
		{"empty chain", "w", workflow.Chain(), "a chain needs at least one step"},
		{"chord of a task", "w", workflow.Chord(task("q", "x"), task("q", "y")), "a chord's first argument is a Group"},
		{"hash in ID", "w#1", task("q", "x"), "'#' is reserved"},
		{"long ID", strings.Repeat("w", 201), task("q", "x"), "at most 200"},
		{"reserved queue", "w", task("onceq-delay-1s", "x"), "reserved"},
		{"workflow queue", "w", task(onceq.WorkflowQueue, "x"), "the workflow service's"},
		{"twice one ID", "w", workflow.Group(workflow.Task(onceq.Task{Queue: "q", ID: "x"}), workflow.Task(onceq.Task{Queue: "q", ID: "x"})), "are both task q/x"},
		{"nested dependency", "w", workflow.Chain(task("q", "x").After(workflow.Ref{Queue: "q", ID: "a"})), "only the workflow's root"},
		{"depends on itself", "w", workflow.Task(onceq.Task{Queue: "q", ID: "x"}).After(workflow.Ref{Queue: "q", ID: "x"}), "a cycle"},
		{"bad dependency", "w", task("q", "x").After(workflow.Ref{Queue: "q q", ID: "a"}), "dependency q q/a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := workflow.Prepare(c.id, c.n, 0)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}

func ExampleChord() {
	// Three reports in parallel, then one summary with all three results,
	// exactly once, whatever order they finish in.
	wf := workflow.Chord(
		workflow.Group(
			workflow.Task(onceq.Task{Queue: "reports", Payload: []byte("eu")}),
			workflow.Task(onceq.Task{Queue: "reports", Payload: []byte("us")}),
			workflow.Task(onceq.Task{Queue: "reports", Payload: []byte("apac")}),
		),
		workflow.Task(onceq.Task{Queue: "summaries"}),
	).OnError(workflow.Task(onceq.Task{Queue: "alerts"}))
	start, err := workflow.Prepare("daily-2026-11-25", wf, 0)
	fmt.Println(start.Queue, start.ID, err)
	// Output: onceq-workflow daily-2026-11-25 <nil>
}

func TestMissingQueue(t *testing.T) {
	var runs sync.Map
	e := run(t, appender(&runs), "steps")
	n := workflow.Chain(task("steps", "a"), task("nosuch", "b"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := workflow.Submit(ctx, e.p, "early", n); !errors.Is(err, producer.ErrQueueNotFound) {
		t.Fatalf("Submit: %v, want ErrQueueNotFound", err)
	}
	// Submitted without the check: the service refuses to start it.
	start, err := workflow.Prepare("late", n, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Submit(ctx, start); err != nil {
		t.Fatal(err)
	}
	st := e.wait(t, "late")
	if st.State != workflow.StateFailed || !strings.Contains(st.Reason, `queue "nosuch" does not exist`) {
		t.Fatalf("got %s %q, want failed: queue does not exist", st.State, st.Reason)
	}
	if _, ran := runs.Load("steps/late/0"); ran {
		t.Fatal("a step of a workflow with a missing queue ran")
	}
}

// TestCancelWaiting: a workflow waiting for a dependency that never comes
// is canceled through its start task, and fails without starting.
func TestCancelWaiting(t *testing.T) {
	var runs sync.Map
	e := run(t, appender(&runs), "steps")
	id := e.submit(t, "forever", task("steps", "x").After(workflow.Ref{Queue: "steps", ID: "never-submitted"}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		st, err := workflow.Get(ctx, e.in, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.State == workflow.StateWaiting {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := e.ctl.Cancel(ctx, onceq.WorkflowQueue, id); err != nil {
		t.Fatal(err)
	}
	st := e.wait(t, id)
	if st.State != workflow.StateFailed || !strings.Contains(st.Reason, "did not start: canceled") {
		t.Fatalf("got %s %q, want failed: did not start: canceled", st.State, st.Reason)
	}
	if _, ran := runs.Load("steps/forever"); ran {
		t.Fatal("the canceled workflow's task ran")
	}
}

// TestStepTooLarge: a step whose next step the brokers refuse as too large
// (its input, the step's result, is over the queue's max.message.bytes)
// is dead-lettered, and its workflow goes on as failed: the OnError
// callback runs.
func TestStepTooLarge(t *testing.T) {
	e := startEnv(t, consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
		if string(task.Payload) == "big" {
			big := make([]byte, 30_000) // random: compression does not shrink it
			rand.Read(big)
			return task.SetResult(big)
		}
		return nil
	}), 2, []string{"alerts"}, consumer.NoSync())
	adm, err := broker.NewAdmin(e.conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := adm.EnsureTopic(ctx, "small", 2, map[string]string{"max.message.bytes": "20000"}); err != nil {
		t.Fatal(err)
	}
	// The first step runs in alerts; the second, never written, goes to
	// small.
	id := e.submit(t, "too-large", workflow.Chain(task("alerts", "big"), task("small", "next")).
		OnError(workflow.Task(onceq.Task{Queue: "alerts", ID: "alert-big"})))
	st := e.wait(t, id)
	if st.State != workflow.StateFailed || !strings.Contains(st.Reason, "too_large") {
		t.Fatalf("got %s %q, want failed: too_large", st.State, st.Reason)
	}
	rec, err := e.in.Wait(ctx, "alerts", "alert-big")
	if err != nil || rec.State != onceq.StateSucceeded {
		t.Fatalf("the OnError callback: %+v %v", rec, err)
	}
}

// TestServiceWithoutDirWritesNothing: a service without a Dir keeps its
// checkpoint in memory and writes no file, not even under the working
// directory (onceq serve without --data-dir runs one so).
func TestServiceWithoutDirWritesNothing(t *testing.T) {
	cwd := t.TempDir()
	t.Chdir(cwd)
	e := startEnv(t, appender(&sync.Map{}), 1, []string{"q"})
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := workflow.NewService(workflow.Conn(e.conn), workflow.Planner(testLadder))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("service without a dir: %v", err)
		}
		if files, err := os.ReadDir(cwd); err != nil || len(files) > 0 {
			t.Errorf("the working directory holds %v (%v), want nothing", files, err)
		}
	}()
	for deadline := time.Now().Add(30 * time.Second); svc.Ready() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the service without a dir is not ready: %v", svc.Ready())
		}
	}
	if st := e.wait(t, e.submit(t, "", task("q", "a"))); st.State != workflow.StateSucceeded {
		t.Fatalf("workflow: %+v", st)
	}
}

// TestCancelRunning: canceling a running workflow lets the step that runs
// finish, and ends every other step canceled without running it: the
// chord's members (and so its callback), the chain's last step and the
// OnError callback. The workflow ends failed at the first canceled step.
// A done workflow is left as it is.
func TestCancelRunning(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var ran sync.Map // payload -> true
	inner := appender(&sync.Map{})
	e := run(t, consumer.HandlerFunc(func(ctx context.Context, tk *consumer.Task) error {
		ran.Store(string(tk.Payload), true)
		if string(tk.Payload) == "hold" {
			close(started)
			<-release
		}
		return inner.Handle(ctx, tk)
	}), "steps")
	id := e.submit(t, "", workflow.Chain(task("steps", "hold"),
		workflow.Chord(workflow.Group(task("steps", "m1"), task("steps", "m2")), task("steps", "cb")),
		task("steps", "last")).OnError(task("steps", "oops")))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the first step never started")
	}
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free() // a failure below must not leave the handler blocked
	// The inspector's view may not have the start task's commit yet: the
	// status before the cancel is pending or running.
	st, err := workflow.Cancel(ctx, e.ctl, id)
	if err != nil || st.State.Final() {
		t.Fatalf("Cancel of the running workflow: %s, %v", st.State, err)
	}
	// The worker reads the cancel from the control topic as this reader
	// does, milliseconds after it is written, and before the step ends.
	cr, err := ctltopic.Open(ctx, e.conn, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cr.Close()
	for !cr.Canceled(onceq.WorkflowQueue, id) {
		if ctx.Err() != nil {
			t.Fatal("the cancel never reached the control topic")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	// Canceled, not ended yet: canceling, not running.
	if st, err := workflow.Get(ctx, e.in, id); err != nil || st.State != workflow.StateCanceling {
		t.Fatalf("the canceled workflow while its step runs: %s %q, %v; want canceling", st.State, st.Reason, err)
	}
	free()

	st = e.wait(t, id)
	if st.State != workflow.StateFailed || !strings.Contains(st.Reason, "workflow "+id+" canceled") || strings.Contains(st.Reason, "canceled: canceled") {
		t.Fatalf("got %s %q, want failed, with the cancel said once", st.State, st.Reason)
	}
	if last := st.Root.Steps[2]; last.State != workflow.StateSkipped {
		t.Errorf("the chain's last step: %s, want skipped", last.State)
	}
	for _, p := range []string{"m1", "m2", "cb", "last", "oops"} {
		if _, ok := ran.Load(p); ok {
			t.Errorf("step %s ran after the cancel", p)
		}
	}
	if _, ok := ran.Load("hold"); !ok {
		t.Error("the running step did not finish")
	}
	// The workflow failed at its first canceled step: the other chord
	// member's record may come a commit later.
	chord := st.Root.Steps[1]
	for _, m := range chord.Steps {
		r, err := e.in.Wait(ctx, m.Queue, m.ID)
		if err != nil || r.State != onceq.StateCanceled || !strings.Contains(r.Error, "canceled") {
			t.Errorf("chord member %s: %+v, %v, want canceled", m.ID, r, err)
		}
	}
	if st.Root.Steps[0].State != workflow.StateSucceeded {
		t.Errorf("the first step: %s, want succeeded", st.Root.Steps[0].State)
	}
	again, err := workflow.Cancel(ctx, e.ctl, id)
	if err != nil || again.State != workflow.StateFailed {
		t.Fatalf("Cancel of the done workflow: %s, %v", again.State, err)
	}
}

// TestNextStepVisibleAndCanceled: a step a workflow's previous step
// emits is recorded in the commit that emits it, scheduled when it is
// delayed, so that it is known and can be canceled before it runs: the
// cancel is written (not refused as unknown), and the step never runs.
func TestNextStepVisibleAndCanceled(t *testing.T) {
	var runs sync.Map
	e := run(t, appender(&runs), "steps")
	id := e.submit(t, "later-step", workflow.Chain(task("steps", "a"),
		workflow.Task(onceq.Task{Queue: "steps", Payload: []byte("b"), Delay: 3 * time.Second})))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if r, err := e.in.Wait(ctx, "steps", id+"/0"); err != nil || r.State != onceq.StateSucceeded {
		t.Fatalf("the first step: %+v, %v", r, err)
	}
	// The next step's record is in the first step's commit, but in a
	// records partition of its own, which the view may read a fetch later.
	var r onceq.TaskRecord
	var err error
	for {
		r, err = e.in.Get(ctx, "steps", id+"/1")
		if !errors.Is(err, inspect.ErrNotFound) || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || r.State != onceq.StateScheduled || r.Worker != "" {
		t.Fatalf("the delayed next step once the first committed: %+v, %v; want scheduled", r, err)
	}
	a, err := e.ctl.Cancel(ctx, "steps", id+"/1")
	if err != nil || a.Outcome != control.CancelPending && a.Outcome != control.CancelDone {
		t.Fatalf("cancel of the next step: %+v, %v; want %s or %s", a, err, control.CancelPending, control.CancelDone)
	}
	if r, err := e.in.Wait(ctx, "steps", id+"/1"); err != nil || r.State != onceq.StateCanceled {
		t.Fatalf("the canceled step: %+v, %v; want canceled", r, err)
	}
	if _, ran := runs.Load("steps/" + id + "/1"); ran {
		t.Fatal("the canceled step ran")
	}
}
