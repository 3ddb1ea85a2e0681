package control_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/control"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// TestSubmitUnique: an unknown ID is submitted with its pending record
// and answered New; asked again, on this view or another process's, it
// is known and nothing more is written; a finished task answers with its final record; bad calls write
// nothing.
func TestSubmitUnique(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "u", 4)
	p, err := producer.New(producer.Conn(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ctl := open(t, conn)
	ctx := ctxT(t)

	subs, err := ctl.SubmitUnique(ctx, p, onceq.Task{Queue: "u", ID: "a"}, onceq.Task{Queue: "u", ID: "later", Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subs {
		if !s.New || s.Receipt.Offset < 0 {
			t.Fatalf("first SubmitUnique: %+v; want New with its receipt", s)
		}
	}
	if !subs[1].Receipt.Delayed {
		t.Fatalf("delayed task's receipt: %+v", subs[1].Receipt)
	}
	subs, err = ctl.SubmitUnique(ctx, p, onceq.Task{Queue: "u", ID: "a"}, onceq.Task{Queue: "u", ID: "later", Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if subs[0].New || subs[0].Record.State != onceq.StatePending || subs[1].New || subs[1].Record.State != onceq.StateScheduled {
		t.Fatalf("second SubmitUnique: %+v; want both known, pending and scheduled", subs)
	}
	// Another process's view knows them from the records topic.
	other := open(t, conn)
	subs, err = other.SubmitUnique(ctx, p, onceq.Task{Queue: "u", ID: "a"})
	if err != nil || subs[0].New || subs[0].Record.State != onceq.StatePending || subs[0].Record.Worker != "" {
		t.Fatalf("SubmitUnique on a fresh view: %+v, %v; want known pending", subs, err)
	}

	// A worker's record of the task finishing.
	now := time.Now().Truncate(time.Millisecond)
	done := onceq.TaskRecord{ID: "a", Queue: "u", State: onceq.StateSucceeded, Attempt: 1, Worker: "w-1", Enqueued: now, Started: now, Finished: now, Result: []byte("42")}
	testutil.NewRecordsWriter(t, conn).Write(false, done)
	if _, err := other.Inspector().Wait(ctx, "u", "a"); err != nil {
		t.Fatal(err)
	}
	subs, err = other.SubmitUnique(ctx, p, onceq.Task{Queue: "u", ID: "a"})
	if err != nil || subs[0].New || subs[0].Record.State != onceq.StateSucceeded || string(subs[0].Record.Result) != "42" {
		t.Fatalf("SubmitUnique of a finished task: %+v, %v; want known succeeded with its result", subs, err)
	}

	subs, err = ctl.SubmitUnique(ctx, p, onceq.Task{Queue: "u", Delay: time.Hour})
	if err != nil || !subs[0].New || len(subs[0].ID) != 36 || subs[0].Receipt.ID != subs[0].ID {
		t.Fatalf("SubmitUnique of a task without an ID: %+v, %v; want New with a generated ID", subs, err)
	}

	if _, err := ctl.SubmitUnique(ctx, p, onceq.Task{Queue: "u", ID: "x"}, onceq.Task{Queue: "u", ID: "x"}); !errors.Is(err, control.ErrDuplicateID) {
		t.Fatalf("an ID twice in one call: %v; want ErrDuplicateID", err)
	}
	if _, err := ctl.SubmitUnique(ctx, p, onceq.Task{Queue: "bad queue", ID: "z"}); err == nil {
		t.Fatal("a bad queue name was accepted")
	}
	// Written: the three new tasks (one in the queue, two in a delay
	// bucket) and their records, nothing of the refused calls.
	if recs := testutil.ReadCommitted(t, conn, 3*time.Second, "u"); len(recs) != 1 || string(recs[0].Key) != "a" {
		t.Fatalf("queue u holds %d tasks; want the one of a", len(recs))
	}
	lines := 0
	for _, r := range testutil.ReadCommitted(t, conn, 3*time.Second, broker.RecordsTopic("u")) {
		trs, err := onceq.DecodeTaskRecords(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		lines += len(trs)
	}
	if lines != 4 {
		t.Fatalf("records topic holds %d task records; want the three pending ones and a's succeeded", lines)
	}
}

// TestGetAfterSubmitUnique: Get finds a task SubmitUnique submitted the
// moment SubmitUnique returns, as pending or scheduled, before the view
// read its record back (a caller that submits and then asks, as the HTTP
// server's publish and job status do, must not be told "not found"); once
// the view has it, Get answers from the view.
func TestGetAfterSubmitUnique(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "u", 4)
	p, err := producer.New(producer.Conn(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ctl := open(t, conn)
	ctx := ctxT(t)
	for i := range 30 {
		task := onceq.Task{Queue: "u", ID: fmt.Sprintf("t%d", i)}
		want := onceq.StatePending
		if i%2 == 1 {
			task.Delay, want = time.Hour, onceq.StateScheduled
		}
		if _, err := ctl.SubmitUnique(ctx, p, task); err != nil {
			t.Fatal(err)
		}
		r, err := ctl.Inspector().Get(ctx, "u", task.ID)
		if err != nil || r.ID != task.ID || r.Queue != "u" || r.State != want {
			t.Fatalf("Get of %s right after SubmitUnique: %+v, %v; want it %s", task.ID, r, err, want)
		}
	}
	done := onceq.TaskRecord{ID: "t0", Queue: "u", State: onceq.StateSucceeded, Attempt: 1, Worker: "w-1", Enqueued: time.Now(), Finished: time.Now(), Result: []byte("42")}
	testutil.NewRecordsWriter(t, conn).Write(false, done)
	if r, err := ctl.Inspector().Wait(ctx, "u", "t0"); err != nil || string(r.Result) != "42" {
		t.Fatalf("Wait for t0: %+v, %v", r, err)
	}
	if r, err := ctl.Inspector().Get(ctx, "u", "t0"); err != nil || r.State != onceq.StateSucceeded || string(r.Result) != "42" {
		t.Fatalf("Get of t0 once the view read it succeeded: %+v, %v", r, err)
	}
}
