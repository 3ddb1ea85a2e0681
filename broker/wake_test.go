package broker

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
)

// TestAppendWakeUps: one wake-up per queue a batch writes a task to, the
// workflow service's queue included, none for onceq's own topics.
func TestAppendWakeUps(t *testing.T) {
	if workflowQueue != onceq.WorkflowQueue {
		t.Fatalf("workflowQueue is %q, onceq.WorkflowQueue %q", workflowQueue, onceq.WorkflowQueue)
	}
	var recs []*kgo.Record
	for _, topic := range []string{"q1", "q1", DLQTopic("q1"), RecordsTopic("q2"), onceq.WorkflowQueue, "q2", DelayTopic(5e9), "__consumer_offsets"} {
		recs = append(recs, &kgo.Record{Topic: topic})
	}
	out := AppendWakeUps(slices.Clone(recs))
	var woken []string
	for _, r := range out[len(recs):] {
		if r.Topic != WakeTopic {
			t.Fatalf("appended a record to %s", r.Topic)
		}
		woken = append(woken, string(r.Key))
	}
	if want := []string{"q1", onceq.WorkflowQueue, "q2"}; !slices.Equal(woken, want) {
		t.Fatalf("woke %q, want %q", woken, want)
	}
	if got := AppendWakeUps(nil); len(got) != 0 {
		t.Fatalf("woke %d for no records", len(got))
	}
}
