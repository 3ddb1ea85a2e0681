package producer_test

import (
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// TestLaneQueues: tasks of lane queues go to their lane's topic, each
// with its queue in the onceq-queue header, which any reader decodes back
// to the queue; a queue of its own topic writes no such header. The lane
// is created as a queue is, and a bad lane queue is refused before
// anything is written.
func TestLaneQueues(t *testing.T) {
	conn, p := setup(t, []string{"own"}, producer.CreateQueues(2))
	ctx := ctxT(t)
	for _, task := range []onceq.Task{
		{ID: "a1", Queue: "fn/resize"},
		{ID: "b1", Queue: "fn/mail"},
		{ID: "a2", Queue: "fn/resize"},
		{ID: "o1", Queue: "own"},
	} {
		if _, err := p.Submit(ctx, task); err != nil {
			t.Fatalf("submitting %s to %s: %v", task.ID, task.Queue, err)
		}
	}
	for _, bad := range []string{"fn/", "fn/a/b", "onceq-x/y"} {
		if _, err := p.Submit(ctx, onceq.Task{Queue: bad}); err == nil {
			t.Errorf("queue %q accepted", bad)
		}
	}
	want := map[string]string{"a1": "fn/resize", "b1": "fn/mail", "a2": "fn/resize", "o1": "own"}
	recs := testutil.ReadSettled(t, conn, 30*time.Second, "fn", "own")
	if len(recs) != len(want) {
		t.Fatalf("%d records in fn and own, want %d", len(recs), len(want))
	}
	for _, r := range recs {
		task, err := onceq.FromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		if task.Queue != want[task.ID] || onceq.QueueTopic(task.Queue) != r.Topic {
			t.Errorf("task %s on topic %s decodes to queue %q, want %q", task.ID, r.Topic, task.Queue, want[task.ID])
		}
		header := false
		for _, h := range r.Headers {
			header = header || h.Key == onceq.HeaderQueue
		}
		if header != (r.Topic == "fn") {
			t.Errorf("task %s on topic %s: onceq-queue header %v", task.ID, r.Topic, header)
		}
	}
}
