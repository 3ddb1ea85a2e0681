package consumer

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/checkpoint"
)

// admitted returns an item for a task record at offset off, admitted in ps.
func admitted(t *testing.T, ps *partState, id string, off int64) *item {
	t.Helper()
	return admittedTask(t, ps, onceq.Task{ID: id, Queue: "q"}, off)
}

// admittedTask is admitted for any task of queue q.
func admittedTask(t *testing.T, ps *partState, task onceq.Task, off int64) *item {
	t.Helper()
	rec := task.Record("q")
	rec.Offset = off
	items := ps.admit([]*kgo.Record{rec})
	if len(items) != 1 {
		t.Fatalf("offset %d not admitted", off)
	}
	it := items[0]
	it.dedupKey, it.idem = onceq.DedupKeyOf(rec)
	return it
}

func openStore(t *testing.T) *checkpoint.Store {
	t.Helper()
	store, err := checkpoint.Open(t.TempDir(), checkpoint.ClusterID("c"), checkpoint.Group("g"), checkpoint.NoSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// TestLookupSeesCheckpointWritesInFlight pins the dedup answer while a
// checkpoint write is in flight: a key committed to Kafka but not yet in
// the store is found in the overlay by the admission-time lookup, and the
// answer holds after the write lands and clears the overlay.
func TestLookupSeesCheckpointWritesInFlight(t *testing.T) {
	tp := checkpoint.TP{Topic: "q", Partition: 0}
	ps := restoredPart(tp, openStore(t))

	// "done" ran and its commit went to Kafka; its checkpoint write is in
	// flight, so the store does not have it.
	done := admitted(t, ps, "done", 0)
	ps.complete(done, &result{id: "done", outcome: outcomeSuccess})
	_, _, _, upTo := ps.collect()

	items := []*item{admitted(t, ps, "done", 1), admitted(t, ps, "new", 2)}
	if err := ps.lookup(items); err != nil {
		t.Fatal(err)
	}
	if !items[0].known || items[1].known {
		t.Fatalf("lookup: done known %v, new known %v; want true, false", items[0].known, items[1].known)
	}

	ps.checkpointed(upTo) // the write landed: the overlay lets go of "done"
	for i, want := range []bool{true, false} {
		got, err := ps.duplicate(items[i], items[i].dedupKey, true)
		if err != nil || got != want {
			t.Errorf("duplicate(%s) = %v, %v; want %v", items[i].dedupKey, got, err, want)
		}
	}
}

// TestDuplicateAfterItsTwinsCheckpoint pins a lost dedup answer: a record
// is looked up while the earlier record of its ID still runs (not
// processed yet), then waits; the earlier one finishes, commits and its
// checkpoint write clears it from the overlay before the record starts.
// The admission-time answer is stale by then: the decision must ask the
// store again, which has the ID.
func TestDuplicateAfterItsTwinsCheckpoint(t *testing.T) {
	tp := checkpoint.TP{Topic: "q", Partition: 0}
	store := openStore(t)
	ps := restoredPart(tp, store)
	first := admitted(t, ps, "a", 0)
	twin := admitted(t, ps, "a", 1)
	if err := ps.lookup([]*item{first, twin}); err != nil {
		t.Fatal(err)
	}
	if twin.known {
		t.Fatal("the twin was known before its first record ran")
	}
	// The scheduler queues it behind the first.
	first.setKeys(true)
	ps.keys["a"] = []*item{twin}
	ps.complete(first, &result{id: "a", outcome: outcomeSuccess})
	landCheckpoint(t, ps, "a")
	dup, err := ps.duplicate(twin, "a", true)
	if err != nil || !dup {
		t.Fatalf("duplicate(twin) = %v, %v; want true: it would run a second time", dup, err)
	}
}

// TestAtLeastOnceKeepsNoIDs pins the memory of an at-least-once partition:
// with no checkpoint nothing clears the processed IDs, so none are kept
// (they were, one per task ever run). Exactly-once keeps them until the
// checkpoint write that makes them durable.
func TestAtLeastOnceKeepsNoIDs(t *testing.T) {
	store := openStore(t)
	tp := checkpoint.TP{Topic: "q", Partition: 0}
	for _, tc := range []struct {
		name  string
		store *checkpoint.Store
		want  int
	}{{"at-least-once", nil, 0}, {"exactly-once", store, 1000}} {
		ps := restoredPart(tp, tc.store)
		for i := range 1000 {
			res := &result{id: fmt.Sprint("t-", i), outcome: outcomeSuccess,
				writes: []stateWrite{{key: []byte("k"), value: []byte(fmt.Sprint(i))}}}
			ps.complete(admitted(t, ps, res.id, int64(i)), res)
		}
		_, _, _, upTo := ps.collect()
		if len(ps.ids) != tc.want {
			t.Errorf("%s: %d IDs kept after 1,000 tasks, want %d", tc.name, len(ps.ids), tc.want)
		}
		if v, ok, _ := ps.overlayGet([]byte("k")); !ok || string(v) != "999" {
			t.Errorf("%s: state k = %q, %v; want the last write, 999", tc.name, v, ok)
		}
		ps.checkpointed(upTo)
		if len(ps.ids) != 0 {
			t.Errorf("%s: %d IDs kept after their checkpoint", tc.name, len(ps.ids))
		}
	}
}

// TestCommitStopsBelowAnOpenRecord pins the commit offset: it never passes
// a record still running, results finished above it are committed all the
// same, and it moves past the record once it finishes. An aborted commit's
// results come back for the next one.
func TestCommitStopsBelowAnOpenRecord(t *testing.T) {
	ps := restoredPart(checkpoint.TP{Topic: "q", Partition: 0}, nil)
	var items []*item
	for i := range 5 {
		items = append(items, admitted(t, ps, fmt.Sprint("t-", i), int64(10+i)))
	}
	for _, i := range []int{0, 2, 3, 4} { // 1 (offset 11) still runs
		ps.complete(items[i], &result{id: items[i].rec.Headers[0].Key, outcome: outcomeSuccess})
	}
	res, to, moved, _ := ps.collect()
	if len(res) != 4 || !moved || to.Offset != 11 {
		t.Fatalf("collect = %d results, offset %d, moved %v; want 4, 11, true", len(res), to.Offset, moved)
	}
	if open, above := ps.progress(); open != 1 || above != 3 {
		t.Fatalf("progress = %d open, %d finished above; want 1, 3", open, above)
	}
	ps.putBack(res) // the commit aborted
	ps.complete(items[1], &result{id: "t-1", outcome: outcomeSuccess})
	res, to, moved, _ = ps.collect()
	if len(res) != 5 || !moved || to.Offset != 15 {
		t.Fatalf("after the abort and the slow record: %d results, offset %d, moved %v; want 5, 15, true", len(res), to.Offset, moved)
	}
	ps.committedTo(to.Offset, nil, false)
	if _, _, moved, _ = ps.collect(); moved {
		t.Fatal("the offset moved again with nothing new")
	}
}

// TestRefusedRecordsFindTheirTasks pins the mapping of records the brokers
// refused back to the tasks that wrote them: turning a task into a dead
// letter drops its state writes, which shifted the changelog indexes of
// the refusals after it, so a second refusal in one commit was charged to
// the wrong task (or none).
func TestRefusedRecordsFindTheirTasks(t *testing.T) {
	w, err := New(Queues("q"), CheckpointDir(t.TempDir()), WithHandler(HandlerFunc(func(context.Context, *Task) error { return nil })))
	if err != nil {
		t.Fatal(err)
	}
	w.topics = newTopicCache(nil)
	w.topics.known("onceq-dlq-q")
	ps := restoredPart(checkpoint.TP{Topic: "q", Partition: 0}, nil)
	src := func(id string) *kgo.Record { task := onceq.Task{ID: id, Queue: "q"}; return task.Record("q") }
	a := &result{id: "a", idem: true, queue: "q", src: src("a"), writes: []stateWrite{{key: []byte("k1"), value: []byte("v")}, {key: []byte("k2"), value: []byte("v")}},
		outputs: []*kgo.Record{{Topic: "out"}}}
	b := &result{id: "b", idem: true, queue: "q", src: src("b"), outputs: []*kgo.Record{{Topic: "out"}}}
	recs := append([]*kgo.Record{}, a.outputs[0], b.outputs[0])
	p := pending{ps: ps, results: []*result{a, b}, logStart: len(recs), marks: markRecords([]*result{a, b})}
	recs = w.appendChangelog(recs, ps.tp, p.marks, p.results)
	p.logEnd = len(recs)
	// a's output and both its state writes (recs: a's output, b's
	// output, the mark record of a and b, a's two writes).
	refused := []refusal{{a.outputs[0], errors.New("too large")}, {recs[3], errors.New("too large")}, {recs[4], errors.New("too large")}}
	w.deadLetterRefused(refused, recs, []pending{p})
	if a.outcome != outcomeDead || a.refused != 1 || len(a.outputs) != 1 || a.outputs[0].Topic != "onceq-dlq-q" {
		t.Fatalf("a: outcome %q, refused %d times, outputs %d; want dead once, to onceq-dlq-q", a.outcome, a.refused, len(a.outputs))
	}
	if tr, ok := w.taskRecord(a); !ok || tr.State != onceq.StateDead || tr.Reason != "too_large" || tr.ID != "a" {
		t.Errorf("a's task record: %+v, %v; want dead, too_large", tr, ok)
	}
	if b.refused != 0 || b.outputs[0].Topic != "out" {
		t.Errorf("b: refused %d times, output to %s; want untouched: none of its records was refused", b.refused, b.outputs[0].Topic)
	}
}

// TestFinishedAboveTheOffset pins how records finished above a
// partition's committed offset are remembered: as offset ranges, for every
// record, and as processed IDs only for idempotency keys. A restarted
// worker acknowledges them by their offsets, whatever their IDs.
func TestFinishedAboveTheOffset(t *testing.T) {
	ps := restoredPart(checkpoint.TP{Topic: "q", Partition: 0}, openStore(t))
	generated := func(off int64) *item {
		return admittedTask(t, ps, onceq.Task{ID: fmt.Sprint("g-", off), GeneratedID: true, Queue: "q"}, off)
	}
	var items []*item
	for off := int64(100); off < 110; off++ {
		if off == 105 {
			items = append(items, admitted(t, ps, "chosen", off))
			continue
		}
		items = append(items, generated(off))
	}
	for i, it := range items {
		if i == 2 || i == 7 { // offsets 102 and 107 still run
			continue
		}
		ps.complete(it, &result{id: it.dedupKey, outcome: outcomeSuccess})
	}
	if len(ps.ids) != 1 {
		t.Fatalf("%d IDs in the overlay, want 1: only the idempotency key", len(ps.ids))
	}
	res, to, _, _ := ps.collect()
	fin, changed := ps.finishedAfter(res, to.Offset)
	want := checkpoint.Ranges{{From: 103, To: 107}, {From: 108, To: 110}}
	if to.Offset != 102 || !changed || fmt.Sprint(fin) != fmt.Sprint(want) {
		t.Fatalf("offset %d, finished %v (changed %v); want 102, %v", to.Offset, fin, changed, want)
	}
	ps.committedTo(to.Offset, fin, changed)
	for off, want := range map[int64]bool{101: false, 102: false, 103: true, 105: true, 107: false, 109: true} {
		it := &item{ps: ps, rec: &kgo.Record{Offset: off}}
		if dup, err := ps.duplicate(it, "x", false); err != nil || dup != want {
			t.Errorf("offset %d: duplicate %v, %v; want %v", off, dup, err, want)
		}
	}
	// 102 finishes: the offset moves to 107, and the ranges below it go.
	ps.complete(items[2], &result{id: items[2].dedupKey, outcome: outcomeSuccess})
	res, to, _, _ = ps.collect()
	fin, changed = ps.finishedAfter(res, to.Offset)
	if want := (checkpoint.Ranges{{From: 108, To: 110}}); to.Offset != 107 || !changed || fmt.Sprint(fin) != fmt.Sprint(want) {
		t.Fatalf("after 102: offset %d, finished %v (changed %v); want 107, %v", to.Offset, fin, changed, want)
	}
	ps.committedTo(to.Offset, fin, changed)
	// Nothing new: nothing to write.
	if _, changed := ps.finishedAfter(nil, to.Offset); changed {
		t.Error("finished ranges changed with no result")
	}
}

// restoredPart is a partition state whose restore is done, as the commit
// requires.
func restoredPart(tp checkpoint.TP, store *checkpoint.Store) *partState {
	ps := newPartState(tp, store)
	ps.restored = true
	return ps
}

// TestCommitWaitsForTheRestore pins a lost protection: a commit that ran
// while a partition restored recorded its (still empty) finished ranges
// after the restore had set them, so the records finished above the
// committed offset ran a second time.
func TestCommitWaitsForTheRestore(t *testing.T) {
	ps := newPartState(checkpoint.TP{Topic: "q", Partition: 0}, openStore(t))
	admitted(t, ps, "held", 10) // fetched, held until the restore ends
	if res, _, moved, _ := ps.collect(); len(res) != 0 || moved {
		t.Fatalf("collect before the restore: %d results, moved %v; want nothing", len(res), moved)
	}
	ps.finished = checkpoint.Ranges{{From: 11, To: 20}} // the restore
	ps.restored = true
	ps.committedTo(10, nil, false) // a commit that wrote no ranges
	if !ps.finished.Contains(15) {
		t.Fatalf("finished %v after a commit that wrote none, want the restored ranges", ps.finished)
	}
}

// TestTwinFinishedBeforeItWasQueued pins refresh: a twin that finished
// between an item's lookup and its queueing left its key in ids, so the
// item is known processed; if a checkpoint write cleared ids meanwhile
// (only possible off the worker's loop, in a restore), the item asks the
// store again when it starts.
func TestTwinFinishedBeforeItWasQueued(t *testing.T) {
	store := openStore(t)
	tp := checkpoint.TP{Topic: "q", Partition: 0}
	for _, cleared := range []bool{false, true} {
		ps := restoredPart(tp, store)
		first := admitted(t, ps, "b", 0)
		twin := admitted(t, ps, "b", 1)
		if err := ps.lookup([]*item{twin}); err != nil || twin.known {
			t.Fatalf("lookup: known %v, %v; want not known", twin.known, err)
		}
		ps.complete(first, &result{id: "b", outcome: outcomeSuccess})
		if cleared {
			landCheckpoint(t, ps, "b")
		}
		ps.mu.Lock()
		ps.refresh(twin)
		ps.mu.Unlock()
		if dup, err := ps.duplicate(twin, "b", true); err != nil || !dup {
			t.Fatalf("cleared %v: duplicate(twin) = %v, %v; want true", cleared, dup, err)
		}
	}
}

// landCheckpoint commits what ps finished, as the worker's commit does:
// its results are collected, the mark of id lands in the store, and the
// write clears the overlay.
func landCheckpoint(t *testing.T, ps *partState, id string) {
	t.Helper()
	_, _, _, upTo := ps.collect()
	b := ps.store.NewBatch()
	if err := b.MarkProcessed(ps.tp, id, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	ps.checkpointed(upTo)
}

// TestEmitMarksDerivedIDsGenerated pins which emitted tasks downstream
// workers may leave unmarked: a derived ID under exactly-once (the commit
// writes it once), never under at-least-once (a crash may write it
// twice), and never an ID the handler chose.
func TestEmitMarksDerivedIDsGenerated(t *testing.T) {
	for _, tc := range []struct {
		g    Guarantee
		id   string
		want bool
	}{{ExactlyOnce, "", true}, {AtLeastOnce, "", false}, {ExactlyOnce, "chosen", false}} {
		w := &Worker{cfg: defaults()}
		w.cfg.guarantee = tc.g
		task := &Task{Task: onceq.Task{ID: "parent", Queue: "q"}, w: w}
		if err := task.Emit(onceq.Task{ID: tc.id, Queue: "out", Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		if got := task.emits[0].GeneratedID; got != tc.want {
			t.Errorf("%s, ID %q: emitted GeneratedID %v, want %v", tc.g, tc.id, got, tc.want)
		}
	}
}
