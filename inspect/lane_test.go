package inspect_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/internal/testutil"
)

// TestLaneQueues: the lane queues of a lane share its records topic, and
// the view keeps each apart: its own records, counts, pages and waits;
// the lane's own queue and a queue whose name starts like the lane's
// ("fnx") stay out of them. A view reopened from its directory counts
// them all again from the store.
func TestLaneQueues(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, broker.RecordsTopic("fn"), 2)
	testutil.CreateTopic(t, conn, broker.RecordsTopic("fnx"), 1)
	w := testutil.NewRecordsWriter(t, conn)
	now := time.Now().Truncate(time.Millisecond)
	at := func(queue, id string, st onceq.TaskState) onceq.TaskRecord {
		r := rec(id, st, 1, now)
		r.Queue = queue
		return r
	}
	var batch []onceq.TaskRecord
	for i := range 30 {
		batch = append(batch, at("fn/img", fmt.Sprintf("i-%02d", i), onceq.StateSucceeded))
	}
	for i := range 7 {
		batch = append(batch, at("fn/mail", fmt.Sprintf("m-%d", i), onceq.StateDead))
	}
	// The same ID in two lane queues and the lane's own queue: three tasks.
	batch = append(batch, at("fn/img", "same", onceq.StateRetrying), at("fn/mail", "same", onceq.StateSucceeded), at("fn", "same", onceq.StateDead))
	w.Write(false, batch...)
	w.Write(false, at("fnx", "x", onceq.StateSucceeded))

	want := map[string]map[onceq.TaskState]int64{
		"fn/img":   {onceq.StateSucceeded: 30, onceq.StateRetrying: 1},
		"fn/mail":  {onceq.StateDead: 7, onceq.StateSucceeded: 1},
		"fn":       {onceq.StateDead: 1},
		"fn/other": {},
		"fnx":      {onceq.StateSucceeded: 1},
	}
	queues := []string{"fn/img", "fn/mail", "fn", "fn/other", "fnx"}
	check := func(in *inspect.Inspector, when string) {
		t.Helper()
		ctx := ctxT(t)
		counts, err := in.CountsOf(ctx, queues)
		if err != nil {
			t.Fatal(err)
		}
		for i, q := range queues {
			if fmt.Sprint(counts[i]) != fmt.Sprint(want[q]) {
				t.Errorf("%s: counts of %s = %v, want %v", when, q, counts[i], want[q])
			}
		}
		for q, st := range map[string]onceq.TaskState{"fn/img": onceq.StateRetrying, "fn/mail": onceq.StateSucceeded, "fn": onceq.StateDead} {
			r, err := in.Get(ctx, q, "same")
			if err != nil || r.State != st || r.Queue != q {
				t.Errorf("%s: Get(%s, same) = %s in %s, %v; want %s", when, q, r.State, r.Queue, err, st)
			}
		}
		page, err := in.List(ctx, "fn/mail", inspect.Filter{})
		if err != nil || len(page.Tasks) != 8 {
			t.Fatalf("%s: List(fn/mail) = %d tasks, %v; want 8", when, len(page.Tasks), err)
		}
		for _, r := range page.Tasks {
			if r.Queue != "fn/mail" {
				t.Fatalf("%s: List(fn/mail) holds a task of %s", when, r.Queue)
			}
		}
	}
	dir := t.TempDir()
	in, err := inspect.Open(inspect.Conn(conn), inspect.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	check(in, "first load")
	// Listed: the lane queues with tasks (fn/other, only asked about, has
	// none).
	if qs, err := in.LaneQueues(ctxT(t), "fn"); err != nil || fmt.Sprint(qs) != "[fn/img fn/mail]" {
		t.Fatalf("LaneQueues(fn) = %v, %v", qs, err)
	}
	// A record written after the load reaches the right queue.
	w.Write(false, at("fn/other", "o", onceq.StateSucceeded))
	if r, err := in.Wait(ctxT(t), "fn/other", "o"); err != nil || r.Queue != "fn/other" {
		t.Fatalf("Wait(fn/other, o) = %+v, %v", r, err)
	}
	want["fn/other"] = map[onceq.TaskState]int64{onceq.StateSucceeded: 1}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	check(open(t, conn, inspect.Dir(dir)), "reopened")
	fresh := open(t, conn)
	if qs, err := fresh.LaneQueues(ctxT(t), "fn"); err != nil || fmt.Sprint(qs) != "[fn/img fn/mail fn/other]" {
		t.Fatalf("LaneQueues(fn) of a new view = %v, %v", qs, err)
	}
	sts, err := fresh.StatsOf(ctxT(t), []string{"fn", "fn/img", "fnx"})
	if err != nil || sts[0].LaneQueues != 3 || sts[1].LaneQueues != 0 || sts[2].LaneQueues != 0 {
		t.Fatalf("the lane queues counted by StatsOf(fn, fn/img, fnx): %+v, %v; want 3, 0, 0", sts, err)
	}
	// The lane's row counts the lane in total: its own tasks and every
	// lane queue's.
	each, err := fresh.CountsOf(ctxT(t), []string{"fn", "fn/img", "fn/mail", "fn/other"})
	if err != nil {
		t.Fatal(err)
	}
	total := map[onceq.TaskState]int64{}
	for _, c := range each {
		for st, n := range c {
			total[st] += n
		}
	}
	if fmt.Sprint(sts[0].LaneTasks) != fmt.Sprint(total) || len(total) == 0 || sts[1].LaneTasks != nil {
		t.Fatalf("LaneTasks of fn: %v, of fn/img: %v; want the lane in total, %v, and none", sts[0].LaneTasks, sts[1].LaneTasks, total)
	}
	if qs, err := fresh.LaneQueues(ctxT(t), "fn/img"); err == nil {
		t.Fatalf("LaneQueues of a lane queue's name: %v, no error", qs)
	}
	if _, err := open(t, conn).Counts(ctxT(t), "nolane/x"); err == nil {
		t.Fatal("Counts of a lane queue whose lane has no records topic: no error")
	}
}

// TestLaneStatsWaiting: a group's waiting tasks on a lane's topic are
// counted per lane queue, from each task's onceq-queue header.
func TestLaneStatsWaiting(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "fn", 2)
	testutil.CreateTopic(t, conn, broker.RecordsTopic("fn"), 1)
	ctx := ctxT(t)
	cl, err := conn.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for q, n := range map[string]int{"fn/img": 5, "fn/mail": 3, "fn": 2} {
		for i := range n {
			task := onceq.Task{ID: fmt.Sprint(q, "-", i), Queue: q}
			recs = append(recs, task.Record(onceq.QueueTopic(q)))
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	var os kadm.Offsets
	for p := range int32(2) {
		os.Add(kadm.Offset{Topic: "fn", Partition: p, At: 0, LeaderEpoch: -1})
	}
	if _, err := adm.Kadm().CommitOffsets(ctx, "g", os); err != nil {
		t.Fatal(err)
	}
	queues := []string{"fn/img", "fn/mail", "fn", "fn/none"}
	sts, err := open(t, conn).StatsOf(ctx, queues)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{5, 3, 2, 0} {
		st := sts[i]
		if len(st.Groups) != 1 || st.Groups[0].Waiting != want || !st.Groups[0].Exact {
			t.Errorf("%s: groups %+v, want g with %d waiting", queues[i], st.Groups, want)
		}
	}
}
