package inspect_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/internal/testutil"
)

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
