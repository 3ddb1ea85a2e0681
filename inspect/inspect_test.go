package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/internal/testutil"
)

func open(t *testing.T, conn broker.Conn, opts ...inspect.Opt) *inspect.Inspector {
	t.Helper()
	in, err := inspect.Open(append([]inspect.Opt{inspect.Conn(conn)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return in
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func rec(id string, st onceq.TaskState, attempt int, at time.Time) onceq.TaskRecord {
	r := onceq.TaskRecord{ID: id, Queue: "q", State: st, Attempt: attempt, Worker: "w-1", Enqueued: at.Add(-time.Second), Started: at, Finished: at}
	if !st.Final() {
		r.Finished = time.Time{}
	}
	return r
}

// TestGetWaitAndTheLastRecord: the last record of an ID is its state; an
// aborted transaction's records never show; a producer's pending record
// never hides a worker's; Wait returns once the record is final, woken by
// its commit.
func TestGetWaitAndTheLastRecord(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, broker.RecordsTopic("q"), 4)
	w := testutil.NewRecordsWriter(t, conn)
	now := time.Now().Truncate(time.Millisecond)
	w.Write(false, rec("a", onceq.StateRetrying, 1, now), rec("b", onceq.StateSucceeded, 1, now))
	w.Write(true, rec("a", onceq.StateDead, 2, now)) // aborted
	pending := onceq.TaskRecord{ID: "b", Queue: "q", State: onceq.StatePending, Enqueued: now}
	w.Write(false, pending, onceq.TaskRecord{ID: "c", Queue: "q", State: onceq.StatePending, Enqueued: now})
	in := open(t, conn)
	ctx := ctxT(t)
	for id, want := range map[string]onceq.TaskState{"a": onceq.StateRetrying, "b": onceq.StateSucceeded, "c": onceq.StatePending} {
		r, err := in.Get(ctx, "q", id)
		if err != nil || r.State != want {
			t.Fatalf("Get(%s) = %s, %v; want %s", id, r.State, err, want)
		}
	}
	if _, err := in.Get(ctx, "q", "nope"); !errors.Is(err, inspect.ErrNotFound) || !strings.Contains(err.Error(), "never submitted") {
		t.Fatalf("Get of an unknown ID: %v", err)
	}
	if r, err := in.Wait(ctx, "q", "b"); err != nil || r.State != onceq.StateSucceeded {
		t.Fatalf("Wait of a finished task: %+v, %v", r, err)
	}
	done := make(chan time.Time, 1)
	var got onceq.TaskRecord
	go func() {
		r, err := in.Wait(ctx, "q", "a")
		if err != nil {
			t.Error(err)
		}
		got = r
		done <- time.Now()
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("Wait returned before the task was final")
	default:
	}
	final := rec("a", onceq.StateSucceeded, 2, now)
	final.Result = []byte("42")
	w.Write(false, final)
	committed := time.Now()
	select {
	case at := <-done:
		if string(got.Result) != "42" || got.State != onceq.StateSucceeded {
			t.Fatalf("Wait returned %+v", got)
		}
		t.Logf("Wait returned %v after the commit", at.Sub(committed))
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return 10s after the commit")
	}
	counts, err := in.Counts(ctx, "q")
	if err != nil || counts[onceq.StateSucceeded] != 2 || counts[onceq.StatePending] != 1 || len(counts) != 2 {
		t.Fatalf("Counts = %v, %v", counts, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := in.Wait(wctx, "q", "c"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its context: %v", err)
	}
}

func TestListPages(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, broker.RecordsTopic("q"), 2)
	w := testutil.NewRecordsWriter(t, conn)
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var batch []onceq.TaskRecord
	for i := 0; i < 250; i++ {
		st := []onceq.TaskState{onceq.StateSucceeded, onceq.StateDead, onceq.StateRetrying}[i%3]
		batch = append(batch, rec(fmt.Sprintf("t-%03d", i), st, 1, base.Add(time.Duration(i)*time.Second)))
	}
	w.Write(false, batch...)
	in := open(t, conn)
	ctx := ctxT(t)
	var all []string
	f := inspect.Filter{Limit: 100}
	for pages := 0; ; pages++ {
		page, err := in.List(ctx, "q", f)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Tasks {
			all = append(all, r.ID)
		}
		if page.Next == "" {
			if pages != 2 {
				t.Errorf("%d pages, want 3", pages+1)
			}
			break
		}
		f.After = page.Next
	}
	if len(all) != 250 || all[0] != "t-249" || all[249] != "t-000" {
		t.Fatalf("listed %d, first %s, last %s", len(all), all[0], all[len(all)-1])
	}
	page, err := in.List(ctx, "q", inspect.Filter{States: []onceq.TaskState{onceq.StateDead}, Since: base.Add(200 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range page.Tasks {
		if r.State != onceq.StateDead || r.Finished.Before(base.Add(200*time.Second)) {
			t.Fatalf("filtered list holds %+v", r)
		}
	}
	if len(page.Tasks) != 16 { // t-202, t-205, ..., t-247
		t.Fatalf("dead since 200s: %d tasks, want 16", len(page.Tasks))
	}
	for _, bad := range []inspect.Filter{{Limit: -1}, {Limit: inspect.MaxLimit + 1}, {After: "x"}, {States: []onceq.TaskState{"done"}}} {
		if _, err := in.List(ctx, "q", bad); err == nil {
			t.Errorf("List accepted %+v", bad)
		}
	}
}

// dirView starts a broker with queue q's records topic of partitions,
// and returns a writer of its records and a directory for a view.
func dirView(t *testing.T, partitions int32) (broker.Conn, *testutil.RecordsWriter, string) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, broker.RecordsTopic("q"), partitions)
	return conn, testutil.NewRecordsWriter(t, conn), t.TempDir()
}

// TestDirResumes: a view kept in a directory reads, after a restart, the
// records written while it was closed, and keeps the ones it had.
func TestDirResumes(t *testing.T) {
	conn, w, dir := dirView(t, 2)
	now := time.Now()
	w.Write(false, rec("a", onceq.StateSucceeded, 1, now))
	in, err := inspect.Open(inspect.Conn(conn), inspect.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Get(ctxT(t), "q", "a"); err != nil {
		t.Fatal(err)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Get(ctxT(t), "q", "a"); !errors.Is(err, inspect.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	w.Write(false, rec("b", onceq.StateDead, 1, now))
	in2 := open(t, conn, inspect.Dir(dir))
	for _, id := range []string{"a", "b"} {
		if _, err := in2.Get(ctxT(t), "q", id); err != nil {
			t.Fatalf("after the restart, %s: %v", id, err)
		}
	}
	if c, err := in2.Counts(ctxT(t), "q"); err != nil || c[onceq.StateSucceeded] != 1 || c[onceq.StateDead] != 1 {
		t.Fatalf("Counts after the restart: %v, %v", c, err)
	}
}

// TestDirCountsWhenAsked: a view kept in a directory counts what it
// holds when its counts are first asked for, not when it opens; the
// records it applies before that, of tasks it holds and of new ones,
// replace the tasks' old records and are counted once.
func TestDirCountsWhenAsked(t *testing.T) {
	conn, w, dir := dirView(t, 2)
	now := time.Now()
	pending := func(id string) onceq.TaskRecord {
		return onceq.TaskRecord{ID: id, Queue: "q", State: onceq.StatePending, Enqueued: now}
	}
	w.Write(false, pending("a"), pending("b"))
	in := open(t, conn, inspect.Dir(dir))
	if c, err := in.Counts(ctxT(t), "q"); err != nil || c[onceq.StatePending] != 2 {
		t.Fatalf("counts: %v (%v)", c, err)
	}
	in.Close()
	w.Write(false, rec("a", onceq.StateSucceeded, 1, now), pending("c"))
	in2 := open(t, conn, inspect.Dir(dir))
	if r, err := in2.Get(ctxT(t), "q", "a"); err != nil || r.State != onceq.StateSucceeded {
		t.Fatalf("a after the reopen: %+v (%v); want succeeded", r, err)
	}
	c, err := in2.Counts(ctxT(t), "q")
	if err != nil || c[onceq.StatePending] != 2 || c[onceq.StateSucceeded] != 1 || len(c) != 2 {
		t.Fatalf("counts after the reopen: %v (%v); want b and c pending, a succeeded", c, err)
	}
	page, err := in2.List(ctxT(t), "q", inspect.Filter{States: []onceq.TaskState{onceq.StatePending}})
	if err != nil || len(page.Tasks) != 2 {
		t.Fatalf("pending tasks after the reopen: %+v (%v); want b and c", page.Tasks, err)
	}
}

// TestDirOfRecreatedTopic: a view kept in a directory forgets what it
// read of a records topic that was deleted and made again, and reads the
// new one from its start, even when the new one holds more records than
// the view read of the old.
func TestDirOfRecreatedTopic(t *testing.T) {
	conn, w, dir := dirView(t, 1)
	topic := broker.RecordsTopic("q")
	now := time.Now()
	w.Write(false, rec("a", onceq.StateSucceeded, 1, now))
	in := open(t, conn, inspect.Dir(dir))
	if _, err := in.Get(ctxT(t), "q", "a"); err != nil {
		t.Fatal(err)
	}
	in.Close()
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := adm.Kadm().DeleteTopics(ctxT(t), topic); err != nil {
		t.Fatal(err)
	}
	testutil.CreateTopic(t, conn, topic, 1)
	w = testutil.NewRecordsWriter(t, conn) // a client of its own: the old one knows the old topic
	w.Write(false, rec("b", onceq.StateDead, 1, now), rec("c", onceq.StateDead, 1, now), rec("d", onceq.StateDead, 1, now))
	in2 := open(t, conn, inspect.Dir(dir))
	c, err := in2.Counts(ctxT(t), "q")
	if err != nil || c[onceq.StateSucceeded] != 0 || c[onceq.StateDead] != 3 {
		t.Fatalf("counts of the new topic: %v (%v); want its 3 dead tasks alone", c, err)
	}
	if _, err := in2.Get(ctxT(t), "q", "a"); !errors.Is(err, inspect.ErrNotFound) {
		t.Fatalf("the old topic's task: %v; want not found", err)
	}
}

func TestErrors(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	in := open(t, conn)
	ctx := ctxT(t)
	if _, err := in.Get(ctx, "nothing", "a"); !errors.Is(err, inspect.ErrNoQueue) {
		t.Fatalf("Get of a queue without records: %v", err)
	}
	if _, err := in.Get(ctx, "bad name", "a"); !errors.Is(err, onceq.ErrInvalidQueue) {
		t.Fatalf("Get of a bad queue name: %v", err)
	}
	if _, err := in.Get(ctx, "q", ""); err == nil {
		t.Fatal("Get of an empty ID")
	}
	_, err := inspect.Open(inspect.Conn(conn), inspect.Retention(time.Second), inspect.LoadTimeout(0))
	if !errors.Is(err, inspect.ErrConfig) || len(onceq.Options(err)) != 2 {
		t.Fatalf("bad options: %v", err)
	}
}

// TestStatsDue: the scheduled and retrying tasks count by when they fall
// due, the overdue ones with the oldest due time; a task that moved on
// counts no more.
func TestStatsDue(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, broker.RecordsTopic("q"), 2)
	w := testutil.NewRecordsWriter(t, conn)
	now := time.Now().Truncate(time.Millisecond)
	sched := func(id string, due time.Time) onceq.TaskRecord {
		return onceq.TaskRecord{ID: id, Queue: "q", State: onceq.StateScheduled, Enqueued: now, Due: due}
	}
	overdue := rec("late", onceq.StateRetrying, 1, now.Add(-time.Minute))
	overdue.Due = now.Add(-2 * time.Second)
	w.Write(false, sched("soon", now.Add(30*time.Second)), sched("hours", now.Add(2*time.Hour)), sched("moved", now.Add(time.Minute/2)),
		sched("days", now.Add(72*time.Hour)), overdue, rec("done", onceq.StateSucceeded, 1, now))
	w.Write(false, rec("moved", onceq.StateSucceeded, 1, now))
	in := open(t, conn)
	st, err := in.Stats(ctxT(t), "q")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"1m": 2, "1h": 2, "1d": 3}
	if fmt.Sprint(st.DueWithin) != fmt.Sprint(want) || st.Overdue != 1 || !st.OldestDue.Equal(overdue.Due) {
		t.Fatalf("due: within %v, overdue %d, oldest %v; want within %v, overdue 1, oldest %v", st.DueWithin, st.Overdue, st.OldestDue, want, overdue.Due)
	}
	if st.Tasks[onceq.StateScheduled] != 3 || st.Tasks[onceq.StateRetrying] != 1 || st.Tasks[onceq.StateSucceeded] != 2 {
		t.Fatalf("tasks: %v", st.Tasks)
	}
}

// TestStatsWaitingCountsTasks: a group's waiting tasks are the tasks past
// its committed offset, not the offsets: the markers of the transactions
// that wrote them take offsets too. Two groups on one partition are
// counted each from its own offset.
func TestStatsWaitingCountsTasks(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "q", 1)
	testutil.CreateTopic(t, conn, broker.RecordsTopic("q"), 1)
	w := testutil.NewRecordsWriter(t, conn)
	ctx := ctxT(t)
	var offs []int64   // of each task
	for i := range 3 { // three transactions: a task and a marker each
		task := onceq.Task{ID: fmt.Sprint("t-", i), Queue: "q"}
		offs = append(offs, w.Commit(false, task.Record("q")))
	}
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	for group, at := range map[string]int64{"behind": 0, "midway": offs[1]} {
		var os kadm.Offsets
		os.Add(kadm.Offset{Topic: "q", Partition: 0, At: at, LeaderEpoch: -1})
		if _, err := adm.Kadm().CommitOffsets(ctx, group, os); err != nil {
			t.Fatal(err)
		}
	}
	in := open(t, conn)
	st, err := in.Stats(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, g := range st.Groups {
		got[g.Group] = g.Waiting
		if !g.Exact {
			t.Errorf("group %s: not exact", g.Group)
		}
	}
	if want := map[string]int64{"behind": 3, "midway": 2}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("waiting %v, want %v (6 offsets: 3 tasks and 3 markers)", got, want)
	}
}
