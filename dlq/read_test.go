package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dlq"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

func dead(id string, partition int32) *kgo.Record {
	t := onceq.Task{ID: id, Queue: "jobs", Attempt: 2, LastError: "failed: " + id, Failed: time.Now()}
	r := t.Record(broker.DLQTopic("jobs"))
	r.Partition = partition
	return r
}

// transact writes records in a transaction of their own, committing it
// or not; open leaves it open and returns the client, to be closed by the
// caller.
func transact(t *testing.T, conn broker.Conn, commit, open bool, recs ...*kgo.Record) *kgo.Client {
	t.Helper()
	cl, err := conn.NewClient(kgo.TransactionalID(fmt.Sprintf("dlq-test-%d", time.Now().UnixNano())),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if open {
		return cl
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	return nil
}

// TestReadStopsAtLastStableOffset: Read sees committed dead letters, not
// aborted ones, and does not wait for a transaction still open.
func TestReadStopsAtLastStableOffset(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "jobs", 1)
	testutil.CreateTopic(t, conn, broker.DLQTopic("jobs"), 3)
	transact(t, conn, true, false, dead("a", 0), dead("b", 1))
	transact(t, conn, false, false, dead("aborted", 0), dead("aborted", 1))
	transact(t, conn, true, false, dead("c", 0))
	open := transact(t, conn, false, true, dead("open", 0), dead("open", 2))
	defer open.Close()

	r, err := dlq.NewReader(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []string
	if err := r.Read(ctx, "jobs", func(l dlq.Letter) error {
		got = append(got, fmt.Sprintf("%s@%d/%d:%s", l.Task.ID, l.Partition, l.Offset, l.Reason))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if s := strings.Join(got, " "); s != "a@0/0:failed c@0/4:failed b@1/0:failed" && s != "b@1/0:failed a@0/0:failed c@0/4:failed" {
		t.Fatalf("read %s", s)
	}

	stop := errors.New("stop")
	if err := r.Read(ctx, "jobs", func(dlq.Letter) error { return stop }); err != stop {
		t.Fatalf("an error from fn: Read returned %v", err)
	}
	if err := r.Read(ctx, "nothing", nil); !errors.Is(err, dlq.ErrNoTopic) ||
		!strings.Contains(err.Error(), "no dead letters for queue nothing (topic onceq-dlq-nothing does not exist)") {
		t.Fatalf("missing topic: %v", err)
	}
	if qs, err := r.Queues(ctx); err != nil || strings.Join(qs, ",") != "jobs" {
		t.Fatalf("Queues: %v, %v", qs, err)
	}
}

// A producer submits requeued tasks.
var _ dlq.Submitter = (*producer.Producer)(nil)

// TestWriteAllOrNothing: when one requeued task is refused, none is
// written.
func TestWriteAllOrNothing(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "jobs", 1)
	p, err := producer.New(producer.Conn(conn))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rs := []dlq.Requeue{
		{Task: onceq.Task{ID: "a", Queue: "jobs", Requeued: "0/0"}},
		{Task: onceq.Task{ID: "b", Queue: "gone", Requeued: "0/1"}},
	}
	if err := dlq.Write(ctx, p, rs); err == nil || !strings.Contains(err.Error(), "nothing requeued") {
		t.Fatalf("Write with a missing queue: %v", err)
	}
	if recs := testutil.ReadCommitted(t, conn, 10*time.Second, "jobs"); len(recs) != 0 {
		t.Fatalf("%d records visible after an aborted requeue", len(recs))
	}
	if err := dlq.Write(ctx, p, rs[:1]); err != nil {
		t.Fatalf("Write: %v", err)
	}
	recs := testutil.ReadCommitted(t, conn, 10*time.Second, "jobs")
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	if task, err := onceq.FromRecord(recs[0]); err != nil || task.DedupKey() != "a@0/0" {
		t.Fatalf("requeued task %+v, %v", task, err)
	}
}

// TestReadLaneQueues: the lane queues of a lane share its dead-letter
// topic, and each reads its own letters only; the lane read as a queue of
// its own reads none of theirs.
func TestReadLaneQueues(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, broker.DLQTopic("fn"), 1)
	letter := func(queue, id string) *kgo.Record {
		task := onceq.Task{ID: id, Queue: queue, Attempt: 1, LastError: "failed: " + id, Failed: time.Now()}
		return task.Record(broker.DLQTopic(queue))
	}
	transact(t, conn, true, false, letter("fn/resize", "a"), letter("fn/mail", "a"), letter("fn", "b"), letter("fn/resize", "c"))
	r, err := dlq.NewReader(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for queue, want := range map[string]string{"fn/resize": "a c", "fn/mail": "a", "fn": "b", "fn/none": ""} {
		var got []string
		err := r.Read(t.Context(), queue, func(l dlq.Letter) error {
			if l.Task.Queue != queue {
				t.Errorf("a letter of %s read for %s", l.Task.Queue, queue)
			}
			got = append(got, l.Task.ID)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, " ") != want {
			t.Errorf("dead letters of %s: %q, want %q", queue, got, want)
		}
	}
	// The stats of every queue count each lane queue's letters apart, from
	// one read of the lane's topic.
	checkStats(t, r, "fn=1 fn/mail=1 fn/resize=2")
}

// checkStats checks r's QueueStats of every queue, as "queue=letters".
func checkStats(t *testing.T, r *dlq.Reader, want string) {
	t.Helper()
	all, err := r.QueueStats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range all {
		got = append(got, fmt.Sprintf("%s=%d", s.Queue, s.DeadLetters))
	}
	if strings.Join(got, " ") != want {
		t.Errorf("QueueStats() = %s, want %s", strings.Join(got, " "), want)
	}
}

// TestRemoveLaneLetters: Remove raises a lane queue's floor, and Read,
// List and QueueStats then pass over its letters below it, while the
// lane's other queues keep theirs; a lower floor written later brings
// nothing back; a queue of its own topic is refused.
func TestRemoveLaneLetters(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, broker.DLQTopic("fn"), 1)
	letter := func(queue, id string) *kgo.Record {
		task := onceq.Task{ID: id, Queue: queue, Attempt: 1, LastError: "failed: " + id, Failed: time.Now()}
		return task.Record(broker.DLQTopic(queue))
	}
	transact(t, conn, true, false, letter("fn/a", "a1"), letter("fn/b", "b1"), letter("fn/a", "a2"), letter("fn/a", "a3"), letter("fn/b", "b2"))
	r, err := dlq.NewReader(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ids := func(queue string) string {
		t.Helper()
		letters, total, err := r.List(t.Context(), queue, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range letters {
			got = append(got, l.Task.ID)
		}
		return fmt.Sprintf("%s (%d)", strings.Join(got, " "), total)
	}
	letters, _, err := r.List(t.Context(), "fn/a", 2)
	if err != nil || len(letters) != 2 {
		t.Fatalf("the first 2 letters of fn/a: %v, %v", letters, err)
	}
	if err := r.Remove(t.Context(), "fn/a", map[int32]int64{0: letters[1].Offset + 1}); err != nil {
		t.Fatal(err)
	}
	if got := ids("fn/a"); got != "a3 (1)" {
		t.Errorf("fn/a after removing its first two: %s", got)
	}
	if got := ids("fn/b"); got != "b1 b2 (2)" {
		t.Errorf("fn/b after fn/a's removal: %s", got)
	}
	if err := r.Remove(t.Context(), "fn/a", map[int32]int64{0: letters[0].Offset + 1}); err != nil {
		t.Fatal(err)
	}
	if got := ids("fn/a"); got != "a3 (1)" {
		t.Errorf("fn/a after a lower floor: %s", got)
	}
	checkStats(t, r, "fn=0 fn/a=1 fn/b=2")
	if err := r.Remove(t.Context(), "fn", map[int32]int64{0: 1}); err == nil || !strings.Contains(err.Error(), "not a lane queue") {
		t.Errorf("Remove of a topic's own queue: %v", err)
	}
}
