package producer_test

import (
	"errors"
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
	recs := testutil.ReadCommitted(t, conn, 10*time.Second, broker.RecordsTopic("jobs"))
	got := map[string]onceq.TaskRecord{}
	for _, r := range recs {
		tr, err := onceq.DecodeTaskRecord(r.Value)
		if err != nil || string(r.Key) != tr.ID {
			t.Fatalf("record %s: %+v, %v", r.Key, tr, err)
		}
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
