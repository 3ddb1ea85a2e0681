package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/ctltopic"
	"github.com/onceq/onceq/internal/testutil"
)

// TestCancel cancels half of 100 delayed tasks: those never run and end
// canceled at once, due an hour ahead as they are, with their cancels
// removed from the control topic in the transaction of that outcome; the
// others, due 2 s ahead, run once. (Whether a worker sees one of those
// before it is due, and holds it as scheduled, depends on how fast the
// worker starts: either is right.)
func TestCancel(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 2)
	testutil.CreateTopic(t, conn, "out", 2)
	canceled := map[string]bool{}
	for i, id := range ids(100) {
		canceled[id] = i%2 == 0
	}
	produceTasks(t, conn, "in", ids(100), func(task *onceq.Task) {
		task.Delay = 2 * time.Second
		if canceled[task.ID] {
			task.Delay = time.Hour
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var cancels []ctltopic.Entry
	var want []string
	for _, id := range ids(100) {
		if canceled[id] {
			cancels = append(cancels, ctltopic.Entry{Queue: "in", ID: id, At: time.Now()})
		} else {
			want = append(want, id)
		}
	}
	if err := ctltopic.Write(ctx, conn, cancels...); err != nil {
		t.Fatal(err)
	}
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("gr"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(copyCounting("out")))
	waitOutputs(t, conn, "out", len(want), 30*time.Second)
	// 50 succeeded; 50 canceled. Once every task's record is final the
	// worker stops: whatever it did is committed, and read after.
	byID := taskRecords(t, waitRecords(t, conn, broker.RecordsTopic("in"), 1, 30*time.Second))
	deadline := time.Now().Add(time.Minute)
	for countFinal(byID) < 100 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		byID = taskRecords(t, testutil.ReadCommitted(t, conn, 10*time.Second, broker.RecordsTopic("in")))
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	byID = taskRecords(t, testutil.ReadCommitted(t, conn, 10*time.Second, broker.RecordsTopic("in")))
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, 10*time.Second, "out"), want)
	for _, id := range ids(100) {
		got := states(byID[id])
		switch {
		case canceled[id] && got != "canceled#1": // at once: it is not held for its due time
			t.Fatalf("%s: %s, want canceled#1", id, got)
		case !canceled[id] && got != "scheduled#1 succeeded#1" && got != "succeeded#1":
			t.Fatalf("%s: %s, want succeeded#1, held as scheduled#1 first or not", id, got)
		}
	}
	last := map[string][]byte{}
	for _, r := range testutil.ReadCommitted(t, conn, 10*time.Second, ctltopic.Topic) {
		last[string(r.Key)] = r.Value
	}
	for _, c := range cancels {
		if v, ok := last[string(ctltopic.CancelKey("in", c.ID))]; !ok || v != nil {
			t.Fatalf("the cancel of %s is still in the control topic: %q", c.ID, v)
		}
	}
}

func countFinal(byID map[string][]onceq.TaskRecord) int {
	n := 0
	for _, rs := range byID {
		if rs[len(rs)-1].State.Final() {
			n++
		}
	}
	return n
}

// TestPause: nothing of a paused queue runs, from the worker's start on;
// once resumed, every task runs once.
func TestPause(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 2)
	testutil.CreateTopic(t, conn, "out", 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ctltopic.Write(ctx, conn, ctltopic.Entry{Queue: "in", Paused: true, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	produceTasks(t, conn, "in", ids(50))
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("gr"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(copyCounting("out")))
	time.Sleep(2 * time.Second)
	if recs, _ := testutil.ReadCommittedErr(conn, 5*time.Second, "out"); len(recs) > 0 {
		t.Fatalf("%d tasks of a paused queue ran", len(recs))
	}
	if err := ctltopic.Write(ctx, conn, ctltopic.Entry{Queue: "in", Paused: false, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	waitOutputs(t, conn, "out", 50, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, 10*time.Second, "out"), ids(50))
}
