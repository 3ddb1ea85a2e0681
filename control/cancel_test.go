package control_test

import (
	"context"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/control"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/internal/ctltopic"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// TestCancelAnswersWhatItDid: a cancel says what it did, and does only
// that: an unknown ID is left alone (and its later submission runs), a
// final task is left as it is, a scheduled one ends canceled when it
// comes, a running one has its context canceled and ends canceled, or
// succeeds if its handler finishes all the same (the cancel is then
// withdrawn), and a cancel ahead ends the first submission canceled.
func TestCancelAnswersWhatItDid(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "q", 1)
	started := make(chan string, 10)
	h := consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
		switch task.ID {
		case "slow", "stubborn":
			started <- task.ID
			<-ctx.Done()
			if task.ID == "slow" {
				return ctx.Err()
			}
			return nil // finishes in spite of the cancel
		}
		return nil
	})
	run(t, "worker", consumer.New, consumer.Conn(conn), consumer.Queues("q"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h), consumer.TaskTimeout(time.Minute))
	p, err := producer.New(producer.Conn(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ctl := open(t, conn)
	ctx := ctxT(t)
	submit := func(task onceq.Task) {
		t.Helper()
		task.Queue = "q"
		if _, err := ctl.SubmitUnique(ctx, p, task); err != nil {
			t.Fatal(err)
		}
	}
	cancel := func(id, want string, opts ...control.CancelOpt) control.CancelAnswer {
		t.Helper()
		a, err := ctl.Cancel(ctx, "q", id, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if a.Outcome != want {
			t.Fatalf("cancel of %s: %s (%s), want %s", id, a.Outcome, a.Describe("q", id), want)
		}
		return a
	}
	wait := func(id string, want onceq.TaskState) onceq.TaskRecord {
		t.Helper()
		r, err := ctl.Inspector().Wait(ctx, "q", id)
		if err != nil {
			t.Fatal(err)
		}
		if r.State != want {
			t.Fatalf("%s ended %s (%s), want %s", id, r.State, r.Error, want)
		}
		return r
	}

	// The worker is up once a task runs.
	submit(onceq.Task{ID: "first"})
	wait("first", onceq.StateSucceeded)

	// Unknown: nothing written; a submission later runs.
	cancel("never", control.CancelUnknown)
	submit(onceq.Task{ID: "never"})
	wait("never", onceq.StateSucceeded)

	// Final: nothing written.
	if a := cancel("first", control.CancelFinal); a.Record.State != onceq.StateSucceeded {
		t.Fatalf("final: record %+v", a.Record)
	}

	// Scheduled an hour ahead: pending, until one dedup window ahead.
	submit(onceq.Task{ID: "later", Delay: time.Hour})
	a := cancel("later", control.CancelPending)
	if d := time.Until(a.Until); d < inspect.DefaultRetention-time.Minute || d > inspect.DefaultRetention {
		t.Fatalf("pending: the cancel lapses in %v, want the dedup window", d)
	}

	// Running, and it gives up: canceled, with its start.
	submit(onceq.Task{ID: "slow"})
	<-started
	if a := cancel("slow", control.CancelDone); a.Record.Started.IsZero() || a.Record.State != onceq.StateCanceled {
		t.Fatalf("running: record %+v", a.Record)
	}

	// Running, and it finishes all the same: too late, and the cancel is
	// withdrawn.
	submit(onceq.Task{ID: "stubborn"})
	<-started
	if a := cancel("stubborn", control.CancelTooLate); a.Record.State != onceq.StateSucceeded {
		t.Fatalf("too late: record %+v", a.Record)
	}

	// Ahead: the first submission ends canceled.
	cancel("ahead-1", control.CancelAheadOf, control.CancelAhead())
	submit(onceq.Task{ID: "ahead-1"})
	wait("ahead-1", onceq.StateCanceled)

	// What stays in the control topic: the pending cancel alone.
	last := map[string][]byte{}
	for _, r := range testutil.ReadCommitted(t, conn, 10*time.Second, ctltopic.Topic) {
		last[string(r.Key)] = r.Value
	}
	for id, want := range map[string]bool{"never": false, "first": false, "later": true, "slow": false, "stubborn": false, "ahead-1": false} {
		v, ok := last[string(ctltopic.CancelKey("q", id))]
		if has := ok && v != nil; has != want {
			t.Errorf("cancel of %s in the control topic: %v, want %v", id, has, want)
		}
		if id == "never" && ok {
			t.Errorf("the cancel of an unknown task wrote %q", v)
		}
	}
}
