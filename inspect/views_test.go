package inspect_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/internal/testutil"
)

// TestAttempts: a task's history holds each failed attempt that was
// retried, with its start, end and error, then its last record; a task
// that never failed has its last record alone, and one waiting for a
// retry its last failure once. The attempts of a task past the retention
// go with it. The queue's failed attempts are counted (Failed), once
// each, and go with their tasks.
func TestAttempts(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, broker.RecordsTopic("q"), 2)
	now := time.Now().Truncate(time.Millisecond)
	run := func(id string, st onceq.TaskState, attempt int, at time.Time, err string) onceq.TaskRecord {
		r := onceq.TaskRecord{ID: id, Queue: "q", State: st, Attempt: attempt, Worker: "w-1", Enqueued: at.Add(-time.Minute),
			Started: at.Add(-time.Second), Finished: at, Error: err}
		if st == onceq.StateRetrying {
			r.Due = at.Add(time.Second)
		}
		return r
	}
	w := testutil.NewRecordsWriter(t, conn)
	old := now.Add(-2 * time.Hour)
	w.Write(false, run("a", onceq.StateRetrying, 1, now.Add(-3*time.Second), "e1"), run("b", onceq.StateSucceeded, 1, now, ""),
		run("c", onceq.StateRetrying, 1, now, "c1"), run("old", onceq.StateRetrying, 1, old, "o1"))
	w.Write(false, run("a", onceq.StateRetrying, 2, now.Add(-time.Second), "e2"), run("old", onceq.StateDead, 2, old, "o2"))
	w.Write(false, run("a", onceq.StateSucceeded, 3, now, ""), run("c", onceq.StateRetrying, 1, now, "c1"))
	dir := t.TempDir()
	in := open(t, conn, inspect.Retention(time.Hour), inspect.Dir(dir))
	ctx := ctxT(t)
	failed := func(in *inspect.Inspector) int64 {
		t.Helper()
		st, err := in.Stats(ctx, "q")
		if err != nil {
			t.Fatal(err)
		}
		return st.Failed
	}
	// a's 2 attempts retried, c's 1 (written twice), old's 1 and its death.
	if n := failed(in); n != 5 {
		t.Errorf("failed attempts: %d, want 5", n)
	}
	history := func(id string) string {
		t.Helper()
		rs, err := in.Attempts(ctx, "q", id)
		if err != nil {
			t.Fatalf("Attempts(%s): %v", id, err)
		}
		s := ""
		for _, r := range rs {
			s += fmt.Sprintf("%d:%s:%s ", r.Attempt, r.State, r.Error)
		}
		return s
	}
	for id, want := range map[string]string{
		"a": "1:retrying:e1 2:retrying:e2 3:succeeded: ",
		"b": "1:succeeded: ",
		"c": "1:retrying:c1 ",
	} {
		if got := history(id); got != want {
			t.Errorf("Attempts(%s) = %q, want %q", id, got, want)
		}
	}
	if _, err := in.Attempts(ctx, "q", "old"); !errors.Is(err, inspect.ErrNotFound) {
		t.Fatalf("Attempts of a task past the retention: %v, want not found", err)
	}
	if n, err := inspect.AttemptKeys(in, "q", "old"); err != nil || n != 1 {
		t.Fatalf("the view keeps %d failed attempts of old before its sweep (%v), want 1", n, err)
	}
	if err := inspect.SweepNow(ctx, in, "q"); err != nil {
		t.Fatal(err)
	}
	if n, err := inspect.AttemptKeys(in, "q", "old"); err != nil || n != 0 {
		t.Fatalf("the view keeps %d failed attempts of old after its sweep (%v), want none", n, err)
	}
	if n, err := inspect.AttemptKeys(in, "q", "a"); err != nil || n != 2 {
		t.Fatalf("the view keeps %d failed attempts of a after the sweep (%v), want its 2", n, err)
	}
	if n := failed(in); n != 3 {
		t.Errorf("failed attempts after old's sweep: %d, want 3", n)
	}
	// Counted again from the stored view when it opens.
	in.Close()
	if n := failed(open(t, conn, inspect.Retention(time.Hour), inspect.Dir(dir))); n != 3 {
		t.Errorf("failed attempts after the view opened again: %d, want 3", n)
	}
}

// TestListDue: the tasks waiting for their due time, scheduled and
// retrying, are listed soonest first (then by ID), overdue ones first,
// page by page; tasks of other states, and of other queues, are not.
func TestListDue(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, broker.RecordsTopic("q"), 2)
	now := time.Now().Truncate(time.Millisecond)
	due := func(id string, st onceq.TaskState, in time.Duration) onceq.TaskRecord {
		return onceq.TaskRecord{ID: id, Queue: "q", State: st, Enqueued: now, Due: now.Add(in)}
	}
	var recs []onceq.TaskRecord
	var want []string
	for i := range 7 {
		// Due in 7, 6, ... 1 hours: written latest first.
		id := fmt.Sprintf("s-%d", i)
		recs = append(recs, due(id, onceq.StateScheduled, time.Duration(7-i)*time.Hour))
		want = append([]string{id}, want...)
	}
	recs = append(recs, due("overdue", onceq.StateRetrying, -time.Minute), due("tie-b", onceq.StateScheduled, 30*time.Minute),
		due("tie-a", onceq.StateScheduled, 30*time.Minute), onceq.TaskRecord{ID: "p", Queue: "q", State: onceq.StatePending, Enqueued: now},
		onceq.TaskRecord{ID: "other", Queue: "r", State: onceq.StateScheduled, Enqueued: now, Due: now.Add(time.Minute)})
	want = append([]string{"overdue", "tie-a", "tie-b"}, want...)
	testutil.NewRecordsWriter(t, conn).Write(false, recs...)
	in := open(t, conn)
	var got []string
	after := ""
	pages := 0
	for {
		pg, err := in.ListDue(ctxT(t), "q", inspect.Filter{Limit: 4, After: after})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range pg.Tasks {
			got = append(got, r.ID)
		}
		if after = pg.Next; after == "" {
			break
		}
	}
	if !slices.Equal(got, want) || pages != 3 {
		t.Fatalf("due soonest first, in %d pages: %v; want %v in 3", pages, got, want)
	}
	if _, err := in.ListDue(ctxT(t), "q", inspect.Filter{After: "bogus"}); err == nil {
		t.Fatal("a bad cursor: no error")
	}
}
