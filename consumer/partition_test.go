package consumer

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/checkpoint"
)

// TestLookupSeesCheckpointWritesInFlight pins the dedup answer while a
// checkpoint write is in flight: a key committed to Kafka but not yet in
// the store is found in the overlay by the dispatch-time lookup, and the
// answer holds after the write lands and clears the overlay.
func TestLookupSeesCheckpointWritesInFlight(t *testing.T) {
	store, err := checkpoint.Open(t.TempDir(), checkpoint.Options{ClusterID: "c", Group: "g", NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tp := checkpoint.TP{Topic: "q", Partition: 0}
	ps := newPartState(tp, store)
	record := func(id string) *kgo.Record {
		task := onceq.Task{ID: id, Queue: "q"}
		return task.Record("q")
	}

	// "done" ran and its commit went to Kafka; its checkpoint write is in
	// flight, so the store does not have it.
	if ps.complete([]finished{{it: &item{ps: ps}, res: &result{id: "done", outcome: outcomeSuccess}}}) {
		t.Fatal("complete reported dropped work")
	}
	_, _, upTo, _ := ps.collect()

	items := []*item{{ps: ps, rec: record("done")}, {ps: ps, rec: record("new")}}
	if err := ps.lookup(items); err != nil {
		t.Fatal(err)
	}
	if !items[0].known || items[1].known {
		t.Fatalf("lookup: done known %v, new known %v; want true, false", items[0].known, items[1].known)
	}

	ps.committed(upTo) // the write landed: the overlay lets go of "done"
	for i, want := range []bool{true, false} {
		got, err := ps.processed(items[i].knownKey, items[i])
		if err != nil || got != want {
			t.Errorf("processed(%s) = %v, %v; want %v", items[i].knownKey, got, err, want)
		}
	}
}

// TestAtLeastOnceKeepsNoIDs pins the memory of an at-least-once partition:
// with no checkpoint nothing clears the processed IDs, so none are kept
// (they were, one per task ever run). Exactly-once keeps them until the
// commit that makes them durable.
func TestAtLeastOnceKeepsNoIDs(t *testing.T) {
	store, err := checkpoint.Open(t.TempDir(), checkpoint.Options{ClusterID: "c", Group: "g", NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tp := checkpoint.TP{Topic: "q", Partition: 0}
	for _, tc := range []struct {
		name  string
		store *checkpoint.Store
		want  int
	}{{"at-least-once", nil, 0}, {"exactly-once", store, 1000}} {
		ps := newPartState(tp, tc.store)
		for i := range 1000 {
			res := &result{id: fmt.Sprint("t-", i), outcome: outcomeSuccess,
				writes: []stateWrite{{key: []byte("k"), value: []byte(fmt.Sprint(i))}}}
			ps.complete([]finished{{it: &item{ps: ps}, res: res}})
		}
		_, _, upTo, _ := ps.collect()
		if len(ps.ids) != tc.want {
			t.Errorf("%s: %d IDs kept after 1,000 tasks, want %d", tc.name, len(ps.ids), tc.want)
		}
		if v, ok, _ := ps.overlayGet([]byte("k")); !ok || string(v) != "999" {
			t.Errorf("%s: state k = %q, %v; want the last write, 999", tc.name, v, ok)
		}
		ps.committed(upTo)
		if len(ps.ids) != 0 {
			t.Errorf("%s: %d IDs kept after their commit", tc.name, len(ps.ids))
		}
	}
}
