package inspect_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/internal/testutil"
)

// TestStatsByPriority: a queue's stats count its unfinished tasks
// (pending, scheduled, retrying) by priority, the finished ones
// not; a task's later record moves it; a view kept in a directory counts
// the same after a restart, and one of an older format is read again
// from the records topic.
func TestStatsByPriority(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, broker.RecordsTopic("q"), 2)
	w := testutil.NewRecordsWriter(t, conn)
	now := time.Now().Truncate(time.Millisecond)
	at := func(r onceq.TaskRecord, prio int) onceq.TaskRecord {
		r.Priority = prio
		return r
	}
	sched := onceq.TaskRecord{ID: "s", Queue: "q", State: onceq.StateScheduled, Enqueued: now, Due: now.Add(time.Hour), Priority: 3}
	w.Write(false, at(rec("a", onceq.StatePending, 0, now), 9), at(rec("b", onceq.StatePending, 0, now), 9),
		at(rec("r", onceq.StateRetrying, 1, now), 0), sched, at(rec("done", onceq.StateSucceeded, 1, now), 5))
	dir := t.TempDir()
	in, err := inspect.Open(inspect.Conn(conn), inspect.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	check := func(in *inspect.Inspector, when string, want map[int]int64) {
		t.Helper()
		st, err := in.Stats(ctxT(t), "q")
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(st.ByPriority) != fmt.Sprint(want) {
			t.Errorf("%s: by priority %v, want %v", when, st.ByPriority, want)
		}
	}
	check(in, "loaded", map[int]int64{0: 1, 3: 1, 9: 2})

	w.Write(false, at(rec("b", onceq.StateSucceeded, 1, now), 9), at(rec("a", onceq.StateRetrying, 1, now), 9))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r, err := in.Get(ctxT(t), "q", "b")
		if err == nil && r.State == onceq.StateSucceeded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b did not succeed in the view: %v, %v", r, err)
		}
	}
	check(in, "b finished, a retrying", map[int]int64{0: 1, 3: 1, 9: 1})
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}

	reopened := open(t, conn, inspect.Dir(dir))
	check(reopened, "after a restart", map[int]int64{0: 1, 3: 1, 9: 1})
	if err := reopened.Close(); err != nil {
		t.Fatal(err)
	}

	// A view of the format before priorities: its records are dropped
	// and read again, a task the topic does not hold with them.
	db, err := pebble.Open(dir, &pebble.Options{Logger: silent{}})
	if err != nil {
		t.Fatal(err)
	}
	// The older meta: state (pending), last transition, worker 0 or 1,
	// due; the index entry: state, last transition, ID.
	last := binary.BigEndian.AppendUint64(nil, uint64(now.UnixMilli()))
	meta := append(append([]byte{0}, last...), make([]byte, 9)...)
	line := fmt.Sprintf(`{"v":1,"id":"stray","queue":"q","state":"pending","enqueued":%d}`, now.UnixMilli())
	if err := db.Set(append([]byte("rq\x00"), "stray"...), append(meta, line...), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Set(append(append([]byte("iq\x00\x00"), last...), "stray"...), nil, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("v"), []byte{1}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	rebuilt := open(t, conn, inspect.Dir(dir))
	check(rebuilt, "an older format, rebuilt", map[int]int64{0: 1, 3: 1, 9: 1})
	if _, err := rebuilt.Get(ctxT(t), "q", "stray"); !errors.Is(err, inspect.ErrNotFound) {
		t.Errorf("a record of the older view, after the rebuild: %v; want ErrNotFound", err)
	}
}

// silent keeps Pebble's informational logs out of the test's.
type silent struct{}

func (silent) Infof(string, ...any)         {}
func (silent) Errorf(string, ...any)        {}
func (silent) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
