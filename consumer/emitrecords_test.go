package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

// TestEmittedTasksRecorded: the tasks a run emits are recorded in their
// queue's records topic in the run's commit, pending or scheduled with
// their due time, before any worker of that queue ran: the records of a
// commit's emitted tasks go in one Kafka record of JSON lines per records
// topic, not one each. A worker with task records off records none.
func TestEmittedTasksRecorded(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	testutil.CreateTopic(t, conn, "out", 3)
	testutil.CreateTopic(t, conn, "bare", 1)
	h := consumer.HandlerFunc(func(_ context.Context, t *consumer.Task) error {
		if t.Queue == "bare" {
			return t.Emit(onceq.Task{Queue: "out", ID: t.ID + "-unrecorded"})
		}
		for i := range 3 {
			if err := t.Emit(onceq.Task{Queue: "out", ID: t.ID + "-now-" + string(rune('a'+i))}); err != nil {
				return err
			}
		}
		return t.Emit(onceq.Task{Queue: "out", ID: t.ID + "-later", Delay: time.Hour})
	})
	runWorker(t, consumer.Conn(conn), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()), consumer.WithHandler(h))
	runWorker(t, consumer.Conn(conn), consumer.Group("bare"), consumer.Queues("bare"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h), consumer.TaskRecords(false))
	produceTasks(t, conn, "in", []string{"t1"})
	produceTasks(t, conn, "bare", []string{"t2"})
	// t1's three immediate tasks and t2's: both commits are in.
	waitOutputs(t, conn, "out", 4, 30*time.Second)
	recs := waitRecords(t, conn, broker.RecordsTopic("out"), 1, 30*time.Second)
	got := map[string]onceq.TaskRecord{}
	for _, r := range recs {
		trs, err := onceq.DecodeTaskRecords(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range trs {
			got[tr.ID] = tr
		}
	}
	if len(recs) != 1 || len(got) != 4 {
		t.Fatalf("%d Kafka records holding %v; want one holding the 4 emitted tasks of t1", len(recs), got)
	}
	for _, id := range []string{"t1-now-a", "t1-now-b", "t1-now-c"} {
		if r := got[id]; r.State != onceq.StatePending || r.Worker != "" || r.Queue != "out" || r.Partition != broker.KeyPartition([]byte(id), 3) {
			t.Errorf("%s: %+v; want pending in its key's partition, no worker", id, r)
		}
	}
	if r := got["t1-later"]; r.State != onceq.StateScheduled || time.Until(r.Due) < 50*time.Minute {
		t.Errorf("t1-later: %+v; want scheduled an hour ahead", r)
	}
}
