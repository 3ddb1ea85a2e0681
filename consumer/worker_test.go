package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/checkpoint"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/internal/testutil"
)

// produceTasks writes a task for each ID to queue, each edited by the edits.
func produceTasks(t *testing.T, conn broker.Conn, queue string, ids []string, edits ...func(*onceq.Task)) {
	t.Helper()
	cl, err := conn.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	recs := make([]*kgo.Record, 0, len(ids))
	for _, id := range ids {
		task := onceq.Task{ID: id, Queue: queue, Payload: []byte("payload-" + id)}
		for _, edit := range edits {
			edit(&task)
		}
		task.Resolve(time.Now())
		recs = append(recs, task.Record(queue))
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("id-%d", i)
	}
	return out
}

// copyCounting emits each task to out and counts its runs in state.
func copyCounting(out string) consumer.Handler { return copyCountingAs(out, "") }

// copyCountingAs is copyCounting naming the worker that ran the task, when
// it is not empty, in its output's "worker" header.
func copyCountingAs(out, worker string) consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		n, err := t.State().Counter([]byte("runs/"+t.ID), 1)
		if err != nil {
			return err
		}
		hs := []onceq.Header{{Key: "runs", Value: []byte(strconv.FormatInt(n, 10))}}
		if worker != "" {
			hs = append(hs, onceq.Header{Key: "worker", Value: []byte(worker)})
		}
		return t.Emit(onceq.Task{ID: t.ID, Queue: out, Key: t.Key, Payload: t.Payload, Headers: hs})
	})
}

// testLadder is the delay ladder of the tests: retries come back fast.
var testLadder = func() *delay.Planner {
	p, err := delay.NewPlanner([]time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second})
	if err != nil {
		panic(err)
	}
	return p
}()

// runWorker runs a worker, and a delay service for its retries, until the
// returned stop is called. The worker uses testLadder and a 100ms-based
// backoff unless opts say otherwise.
func runWorker(t *testing.T, opts ...consumer.Opt) (stop func() error) {
	t.Helper()
	base := []consumer.Opt{consumer.Planner(testLadder), consumer.Backoff(100*time.Millisecond, 2, time.Second)}
	w, err := consumer.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- w.Run(ctx) }()
	svc, err := delay.NewService(delay.Conn(w.Conn()), delay.WithPlanner(testLadder), delay.StateDir(t.TempDir()),
		delay.CommitInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := svc.Run(ctx); err != nil {
			t.Errorf("delay service: %v", err)
		}
	}()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(60 * time.Second):
				runErr = errors.New("worker did not stop within 60s")
			}
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// waitOutputs waits until the read_committed output holds want records.
func waitOutputs(t *testing.T, conn broker.Conn, topic string, want int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	return waitRecords(t, conn, topic, want, timeout)
}

// waitRecords waits until a read_committed reader sees want records in
// topic (which may not exist yet).
func waitRecords(t *testing.T, conn broker.Conn, topic string, want int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		recs, _ := testutil.ReadCommittedErr(conn, 30*time.Second, topic)
		if len(recs) >= want || time.Now().After(deadline) {
			return recs
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkExactlyOnce asserts every ID appears once in the output with a run
// count of 1.
func checkExactlyOnce(t *testing.T, recs []*kgo.Record, want []string) {
	t.Helper()
	seen := map[string]int{}
	for _, r := range recs {
		task, err := onceq.FromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		seen[task.ID]++
		for _, h := range task.Headers {
			if h.Key == "runs" && string(h.Value) != "1" {
				t.Errorf("task %s committed with run count %s", task.ID, h.Value)
			}
		}
	}
	missing, dups := 0, 0
	for _, id := range want {
		switch seen[id] {
		case 0:
			if missing < 5 {
				t.Logf("missing %s", id)
			}
			missing++
		case 1:
		default:
			dups++
		}
	}
	if missing > 0 || dups > 0 || len(seen) != len(want) {
		t.Fatalf("outputs: %d records, %d distinct IDs, want %d: %d missing, %d duplicated", len(recs), len(seen), len(want), missing, dups)
	}
}

func TestWorkerCopiesExactlyOnceWithDuplicates(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 4)
	testutil.CreateTopic(t, conn, "out", 4)
	all := ids(2000)
	produceTasks(t, conn, "in", all)
	produceTasks(t, conn, "in", all[:300]) // resubmitted duplicates
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("g1"), consumer.Queues("in"),
		consumer.CheckpointDir(t.TempDir()), consumer.WithHandler(copyCounting("out")), consumer.SessionTimeout(6*time.Second),
		consumer.TransactionTimeout(5*time.Second))
	waitOutputs(t, conn, "out", len(all), 60*time.Second)
	time.Sleep(500 * time.Millisecond) // duplicates would land after the originals
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, 30*time.Second, "out"), all)
	checkMarkRecords(t, conn, broker.ChangelogTopic("g1", "in"), all)
}

// checkMarkRecords reads a changelog and checks that it marks the IDs
// want, each once, in records of many IDs (one per partition and commit),
// not one record per ID.
func checkMarkRecords(t *testing.T, conn broker.Conn, changelog string, want []string) {
	t.Helper()
	seen := map[string]int{}
	records := 0
	for _, r := range testutil.ReadCommitted(t, conn, time.Minute, changelog) {
		e, err := checkpoint.DecodeChangelog(r.Key, r.Value)
		if err != nil {
			t.Fatalf("changelog offset %d: %v", r.Offset, err)
		}
		switch e.Kind {
		case checkpoint.KindMark:
			t.Fatalf("changelog offset %d: a record of one ID (%s)", r.Offset, e.ID)
		case checkpoint.KindMarks:
			records++
			for _, m := range e.Marks {
				seen[m.ID]++
			}
		}
	}
	for _, id := range want {
		if seen[id] != 1 {
			t.Fatalf("%s marked %d times in the changelog, want once", id, seen[id])
		}
	}
	if records == 0 || records > len(want)/10 {
		t.Fatalf("%d mark records for %d IDs: want records of many IDs each", records, len(want))
	}
	t.Logf("%d IDs in %d mark records", len(want), records)
}

// TestWorkerExpiresMarkRecords: past the dedup window, expiry removes the
// processed IDs beside the commits and the changelog gets one tombstone
// per mark record; the IDs then run again if submitted again. The
// worker's clock jumps past the window once the IDs are marked.
func TestWorkerExpiresMarkRecords(t *testing.T) {
	var ahead atomic.Int64 // how far the worker's clock runs ahead
	clock := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 4)
	testutil.CreateTopic(t, conn, "out", 4)
	all := ids(3000)
	produceTasks(t, conn, "in", all)
	reg := prometheus.NewRegistry()
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("g1"), consumer.Queues("in"), consumer.DedupWindow(time.Minute),
		consumer.CheckpointDir(t.TempDir()), consumer.WithHandler(copyCounting("out")), consumer.SessionTimeout(6*time.Second),
		consumer.TransactionTimeout(5*time.Second), consumer.Registerer(reg), consumer.Clock(clock))
	defer stop()
	waitOutputs(t, conn, "out", len(all), 60*time.Second)
	ahead.Store(int64(time.Minute + time.Second))
	changelog := broker.ChangelogTopic("g1", "in")
	deadline := time.Now().Add(time.Minute)
	for {
		live, tombs := map[string]bool{}, 0
		for _, r := range testutil.ReadCommitted(t, conn, time.Minute, changelog) {
			e, err := checkpoint.DecodeChangelog(r.Key, r.Value)
			if err != nil {
				t.Fatalf("changelog offset %d: %v", r.Offset, err)
			}
			switch {
			case e.Kind == checkpoint.KindMark:
				t.Fatalf("changelog offset %d: a record or tombstone of one ID (%s)", r.Offset, e.ID)
			case e.Kind == checkpoint.KindMarks && e.Delete:
				delete(live, string(r.Key))
				tombs++
			case e.Kind == checkpoint.KindMarks:
				live[string(r.Key)] = true
			}
		}
		if len(live) == 0 && tombs > 0 {
			t.Logf("%d mark records, each tombstoned", tombs)
			// The pass that handed the tombstones over counts its IDs
			// when it ends.
			for end := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				n := metricValue(t, reg, "onceq_processed_ids_expired_total")
				if n == float64(len(all)) {
					break
				}
				if time.Now().After(end) {
					t.Fatalf("onceq_processed_ids_expired_total = %v, want %d", n, len(all))
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d mark records still without a tombstone a minute after their 1 minute window ended (%d tombstones)", len(live), tombs)
		}
		time.Sleep(2 * time.Second)
	}
	// Expired, the IDs run again when submitted again, once each.
	produceTasks(t, conn, "in", all[:100])
	waitOutputs(t, conn, "out", len(all)+100, 60*time.Second)
}

// TestWorkerPartitionMovesToEmptyCheckpoint pins the bug where changelog
// records went to the partition their key hashed to instead of their
// source partition's, so a restore missed processed IDs.
func TestWorkerPartitionMovesToEmptyCheckpoint(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 2)
	testutil.CreateTopic(t, conn, "out", 2)
	first := ids(500)
	produceTasks(t, conn, "in", first)
	opts := []consumer.Opt{consumer.Conn(conn), consumer.Group("g2"), consumer.Queues("in"),
		consumer.WithHandler(copyCounting("out")), consumer.SessionTimeout(6 * time.Second), consumer.TransactionTimeout(5 * time.Second), consumer.Logger(testLogger(t))}
	stop := runWorker(t, append(opts, consumer.CheckpointDir(t.TempDir()))...)
	waitOutputs(t, conn, "out", len(first), 60*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// The same IDs again: a worker with an empty checkpoint dir must find
	// them processed through the changelog and not run them.
	produceTasks(t, conn, "in", first)
	var ran atomic.Int64
	counting := consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		ran.Add(1)
		return copyCounting("out").Handle(ctx, t)
	})
	dir := t.TempDir()
	opts[4] = consumer.WithHandler(counting)
	stop2 := runWorker(t, append(opts, consumer.CheckpointDir(dir))...)
	time.Sleep(3 * time.Second)
	fresh := []string{"fresh-1", "fresh-2"}
	produceTasks(t, conn, "in", fresh)
	waitOutputs(t, conn, "out", len(first)+len(fresh), 60*time.Second)
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	if n := ran.Load(); n != int64(len(fresh)) {
		t.Fatalf("the second worker ran %d tasks, want only the %d fresh ones", n, len(fresh))
	}
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, 30*time.Second, "out"), append(first, fresh...))
	st, err := checkpoint.Open(filepath.Join(dir, "store"), checkpoint.ReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	found := 0
	for p := int32(0); p < 2; p++ {
		hs, err := st.HasMany(checkpoint.TP{Topic: "in", Partition: p}, first)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if h {
				found++
			}
		}
	}
	if found != len(first) {
		t.Fatalf("restored checkpoint holds %d of the %d processed IDs", found, len(first))
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestDuplicatesWithOtherKeysRunOnce pins the race where two records of one
// ID with different keys, in one partition, went to different lanes and
// ran at once, each before the other was recorded as processed.
func TestDuplicatesWithOtherKeysRunOnce(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	all := ids(3000)
	cl, err := conn.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, id := range all {
		for _, key := range []string{"a-" + id, "b-" + id, ""} {
			task := onceq.Task{ID: id, Queue: "in", Key: []byte(key)}
			task.Resolve(time.Now())
			cl.Produce(t.Context(), task.Record("in"), nil)
		}
	}
	if err := cl.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	var runs sync.Map
	var total atomic.Int64
	h := consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
		n, _ := runs.LoadOrStore(task.ID, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		total.Add(1)
		return nil
	})
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("keys"), consumer.Queues("in"), consumer.Concurrency(32),
		consumer.CheckpointDir(t.TempDir()), consumer.WithHandler(h))
	deadline := time.Now().Add(time.Minute)
	for total.Load() < int64(len(all)) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second) // the duplicates follow their originals closely
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range all {
		n, ok := runs.Load(id)
		if !ok || n.(*atomic.Int64).Load() != 1 {
			t.Fatalf("task %s did not run exactly once (%d runs in all for %d IDs)", id, total.Load(), len(all))
		}
	}
}

// TestStopDuringStartup pins a worker told to stop while it was still
// starting (reaching the brokers, opening its checkpoint, joining) exiting
// with an error instead of stopping cleanly.
func TestStopDuringStartup(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 4)
	for _, after := range []time.Duration{0, time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond,
		60 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond} {
		w, err := consumer.New(consumer.Conn(conn), consumer.Group("startup"), consumer.Queues("in"),
			consumer.CheckpointDir(t.TempDir()), consumer.WithHandler(copyCounting("out")))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(after, cancel)
		if err := w.Run(ctx); err != nil {
			t.Errorf("stopped %v after the start: %v", after, err)
		}
		cancel()
	}
}

// metricValue reads an unlabelled counter or gauge from reg.
func metricValue(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			if m := mf.GetMetric()[0]; m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			} else if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no counter or gauge %s", name)
	return 0
}

// runUntilCleanup runs w until the test (or benchmark) ends, and fails it
// if Run returns an error.
func runUntilCleanup(t testing.TB, w *consumer.Worker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}
