package producer_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// TestSubmitPending: the task and its pending (or scheduled) record commit
// together, the records topic is made with the queue's partitions, and an
// aborted transaction leaves neither visible. A record has its task's
// priority, or the producer's TaskPriority for a task of none.
func TestSubmitPending(t *testing.T) {
	conn, p := setup(t, []string{"jobs"}, producer.TaskPriority(2))
	ctx := ctxT(t)
	err := p.Tx(ctx, func(tx *producer.Tx) error {
		if err := tx.SubmitPending(onceq.Task{Queue: "jobs", ID: "now", Payload: []byte("p"), Priority: 6}); err != nil {
			return err
		}
		return tx.SubmitPending(onceq.Task{Queue: "jobs", ID: "later", Payload: []byte("p"), Delay: time.Minute})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Tx(ctx, func(tx *producer.Tx) error {
		if err := tx.SubmitPending(onceq.Task{Queue: "jobs", ID: "aborted"}); err != nil {
			return err
		}
		return errors.New("changed my mind")
	}); err == nil {
		t.Fatal("the aborted transaction committed")
	}
	var generated string
	if err := p.Tx(ctx, func(tx *producer.Tx) error {
		if err := tx.SubmitPending(onceq.Task{Queue: "jobs"}); err != nil {
			return err
		}
		rcs, err := tx.Receipts(ctx)
		if err == nil {
			generated = rcs[0].ID
		}
		return err
	}); err != nil || len(generated) != 36 {
		t.Fatalf("a task without ID: %v, ID %q; want a generated UUID", err, generated)
	}
	got := map[string]onceq.TaskRecord{}
	for _, tr := range taskRecords(t, conn, "jobs") {
		got[tr.ID] = tr
	}
	if len(got) != 3 || got[generated].State != onceq.StatePending || got["now"].State != onceq.StatePending || got["later"].State != onceq.StateScheduled || got["now"].Worker != "" {
		t.Fatalf("records: %+v", got)
	}
	if got["now"].Priority != 6 || got["later"].Priority != 2 {
		t.Errorf("records of priority %d and %d, want now's own 6 and the producer's 2 for later", got["now"].Priority, got["later"].Priority)
	}
	if d := time.Until(got["later"].Due); d < 50*time.Second || d > time.Minute {
		t.Errorf("scheduled record due in %v, want a minute", d)
	}
	seen := visibleIDs(t, conn)
	if !seen["now"] || !seen["later"] || seen["aborted"] {
		t.Fatalf("visible tasks: %v", seen)
	}
	info, err := describe(conn, broker.RecordsTopic("jobs"))
	if err != nil {
		t.Fatal(err)
	}
	queue, err := describe(conn, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Partitions) != len(queue.Partitions) {
		t.Errorf("records topic has %d partitions, the queue %d", len(info.Partitions), len(queue.Partitions))
	}
}

// TestPendingRecordPartition: a pending record names the partition of its
// queue where its task waits, and a scheduled one the partition its task
// is moved to when due (its key's), not partition 0 whatever it is.
func TestPendingRecordPartition(t *testing.T) {
	conn, p := setup(t, []string{"jobs"})
	ctx := ctxT(t)
	if err := p.Tx(ctx, func(tx *producer.Tx) error {
		for i := range 8 {
			if err := tx.SubmitPending(onceq.Task{Queue: "jobs", ID: fmt.Sprint("now-", i)}); err != nil {
				return err
			}
			if err := tx.SubmitPending(onceq.Task{Queue: "jobs", ID: fmt.Sprint("later-", i), Delay: time.Hour}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	where := map[string]int32{}
	for _, r := range testutil.ReadSettled(t, conn, 10*time.Second, "jobs") {
		task, err := onceq.FromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		where[task.ID] = r.Partition
	}
	for i := range 8 {
		id := fmt.Sprint("later-", i)
		where[id] = broker.KeyPartition([]byte(id), 4)
	}
	recs := taskRecords(t, conn, "jobs")
	if len(recs) != 16 {
		t.Fatalf("%d records, want 16", len(recs))
	}
	zero := 0
	for _, tr := range recs {
		if want, ok := where[tr.ID]; !ok || tr.Partition != want {
			t.Errorf("the %s record of %s names partition %d; its task's is %d", tr.State, tr.ID, tr.Partition, want)
		}
		if tr.Partition == 0 {
			zero++
		}
	}
	if zero == len(recs) {
		t.Fatal("every task in partition 0 of 4: the test proves nothing")
	}
}

// taskRecords reads the committed task records of a queue, every line of
// every Kafka record.
func taskRecords(t *testing.T, conn broker.Conn, queue string) []onceq.TaskRecord {
	t.Helper()
	var out []onceq.TaskRecord
	for _, r := range testutil.ReadSettled(t, conn, 10*time.Second, broker.RecordsTopic(queue)) {
		trs, err := onceq.DecodeTaskRecords(r.Value)
		if err != nil {
			t.Fatalf("record at %d/%d: %v", r.Partition, r.Offset, err)
		}
		out = append(out, trs...)
	}
	return out
}
