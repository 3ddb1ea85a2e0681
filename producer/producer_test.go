package producer_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// setup starts a broker with the given queues (4 partitions each) and a
// producer on it.
func setup(t *testing.T, queues []string, opts ...producer.Opt) (broker.Conn, *producer.Producer) {
	t.Helper()
	_, conn := testutil.StartBroker(t, "")
	for _, q := range queues {
		testutil.CreateTopic(t, conn, q, 4)
	}
	p, err := producer.New(append([]producer.Opt{producer.Conn(conn)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return conn, p
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// readTasks decodes every record read_committed consumers see on topics.
func readTasks(t *testing.T, conn broker.Conn, topics ...string) []onceq.Task {
	t.Helper()
	var out []onceq.Task
	for _, r := range testutil.ReadSettled(t, conn, 20*time.Second, topics...) {
		task, err := onceq.FromRecord(r)
		if err != nil {
			t.Fatalf("record %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
		}
		out = append(out, task)
	}
	return out
}

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

func TestSubmit(t *testing.T) {
	now := time.UnixMilli(1_900_000_000_123)
	conn, p := setup(t, []string{"jobs"},
		producer.TaskMaxAttempts(5), producer.TaskTimeout(time.Minute), producer.TaskPriority(4),
		producer.Now(func() time.Time { return now }))
	ctx := ctxT(t)
	rc, err := p.Submit(ctx, onceq.Task{Queue: "jobs", Payload: []byte("hello"), Headers: []onceq.Header{{Key: "trace", Value: []byte("t1")}}})
	if err != nil {
		t.Fatal(err)
	}
	u, err := uuid.Parse(rc.ID)
	if err != nil || u.Version() != 7 {
		t.Fatalf("assigned ID %q: want a UUIDv7 (%v)", rc.ID, err)
	}
	if rc.Topic != "jobs" || rc.Offset != 0 || rc.Delayed {
		t.Fatalf("receipt %+v", rc)
	}
	rc2, err := p.Submit(ctx, onceq.Task{Queue: "jobs", ID: "given-id", Key: []byte("k"), MaxAttempts: 2, Timeout: time.Second, Priority: 8})
	if err != nil {
		t.Fatal(err)
	}
	if rc2.ID != "given-id" {
		t.Fatalf("receipt ID %q, want the task's own", rc2.ID)
	}

	recs := testutil.ReadSettled(t, conn, 20*time.Second, "jobs")
	if len(recs) != 2 {
		t.Fatalf("read %d records, want 2", len(recs))
	}
	byID := map[string]onceq.Task{}
	for _, r := range recs {
		task, err := onceq.FromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := header(r, onceq.HeaderQueue); ok {
			t.Errorf("task %s on its queue has an onceq-queue header", task.ID)
		}
		byID[task.ID] = task
	}
	got := byID[rc.ID]
	if string(got.Payload) != "hello" || string(got.Key) != rc.ID || got.MaxAttempts != 5 || got.Timeout != time.Minute || got.Priority != 4 ||
		!got.Enqueued.Equal(now.Truncate(time.Millisecond)) || len(got.Headers) != 1 || got.Headers[0].Key != "trace" {
		t.Errorf("first task read back as %+v", got)
	}
	if got := byID["given-id"]; string(got.Key) != "k" || got.MaxAttempts != 2 || got.Timeout != time.Second || got.Priority != 8 {
		t.Errorf("second task read back as %+v: its own attempts, timeout and priority must win over the defaults", got)
	}
}

func TestSubmitAsync(t *testing.T) {
	const n = 5000
	conn, p := setup(t, []string{"async"}, producer.MaxBufferedRecords(100))
	ctx := ctxT(t)
	var (
		mu       sync.Mutex
		receipts = map[string]producer.Receipt{}
		errs     []error
		ids      []string
	)
	for i := 0; i < n; i++ {
		id := p.SubmitAsync(ctx, onceq.Task{Queue: "async", Payload: []byte("x")}, func(rc producer.Receipt, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			receipts[rc.ID] = rc
		})
		ids = append(ids, id)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 || len(receipts) != n {
		t.Fatalf("%d receipts and errors %v, want %d receipts", len(receipts), errs, n)
	}
	for i, id := range ids {
		if _, ok := receipts[id]; !ok {
			t.Fatalf("SubmitAsync returned ID %s, which no receipt has", id)
		}
		if i > 0 && id <= ids[i-1] {
			t.Fatalf("IDs not time-ordered: %s after %s", id, ids[i-1])
		}
	}
	seen := map[string]int{}
	for _, task := range readTasks(t, conn, "async") {
		seen[task.ID]++
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Fatalf("task %s read %d times, want once", id, seen[id])
		}
	}
}

// TestSubmitMany: one call submits plain tasks, tasks with IDs of their
// own, delayed tasks and invalid ones, more than MaxBufferedRecords of
// them, so that it takes slots in bulk and waits for more. fn is called
// once per index, with the task's receipt or why it was refused; the
// written tasks are read back once each, delayed ones in their bucket and
// never due before their Delay after the call began.
func TestSubmitMany(t *testing.T) {
	const n = 2000
	reg := prometheus.NewRegistry()
	conn, p := setup(t, []string{"many"}, producer.MaxBufferedRecords(64), producer.Registerer(reg))
	ctx := ctxT(t)
	tasks := make([]onceq.Task, n)
	for i := range tasks {
		tasks[i] = onceq.Task{Queue: "many", Payload: []byte(strconv.Itoa(i))}
		switch i % 10 {
		case 1:
			tasks[i].ID = "own-" + strconv.Itoa(i)
		case 2:
			tasks[i].Delay = 90 * time.Second
		case 3:
			tasks[i].Queue = "not a queue"
		}
	}
	var (
		mu       sync.Mutex
		receipts = make([]producer.Receipt, n)
		errs     = make([]error, n)
		calls    = make([]int, n)
	)
	before := time.Now()
	p.SubmitMany(ctx, tasks, func(i int, rc producer.Receipt, err error) {
		mu.Lock()
		defer mu.Unlock()
		receipts[i], errs[i] = rc, err
		calls[i]++
	})
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if held := producer.HeldSlots(p); held != 0 {
		t.Fatalf("%d admission slots held after every task was acknowledged or refused", held)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]int{} // ID -> index
	for i, task := range tasks {
		rc, err := receipts[i], errs[i]
		switch {
		case calls[i] != 1:
			t.Fatalf("task %d: fn called %d times, want once", i, calls[i])
		case task.Queue != "many":
			if !errors.Is(err, onceq.ErrInvalidQueue) {
				t.Fatalf("task %d to queue %q: %v, want ErrInvalidQueue", i, task.Queue, err)
			}
			continue
		case err != nil:
			t.Fatalf("task %d: %v", i, err)
		case task.ID != "" && rc.ID != task.ID:
			t.Fatalf("task %d with ID %s: receipt %+v", i, task.ID, rc)
		case rc.Delayed != (task.Delay > 0) || rc.Topic != map[bool]string{false: "many", true: "onceq-delay-30s"}[task.Delay > 0]:
			t.Fatalf("task %d (delay %v): receipt %+v", i, task.Delay, rc)
		}
		want[rc.ID] = i
	}
	if tasks[0].ID != "" || tasks[2].Due != (time.Time{}) {
		t.Fatal("SubmitMany changed the caller's tasks")
	}
	for _, got := range readTasks(t, conn, "many", "onceq-delay-30s") {
		i, ok := want[got.ID]
		if !ok {
			t.Fatalf("task %s read twice, or never submitted", got.ID)
		}
		delete(want, got.ID)
		if string(got.Payload) != strconv.Itoa(i) {
			t.Fatalf("task %s: payload %q, want %d", got.ID, got.Payload, i)
		}
		if d := tasks[i].Delay; d > 0 && got.Due.Before(before.Add(d)) {
			t.Fatalf("task %d delayed %v is due at %v, before %v", i, d, got.Due, before.Add(d))
		}
	}
	if len(want) > 0 {
		t.Fatalf("%d tasks not written", len(want))
	}
	if got := metric(t, reg, "onceq_tasks_submitted_total", map[string]string{"queue": "many"}); got != n*9/10 {
		t.Fatalf("onceq_tasks_submitted_total = %v, want %d", got, n*9/10)
	}
	// The call's first task and every 16th after it are in the latency
	// sample; none of those indexes is an invalid task's (i%10 == 3).
	if got, want := histogramCount(t, reg, "onceq_submit_duration_seconds", "many"), (n+producer.LatencySample-1)/producer.LatencySample; got != uint64(want) {
		t.Fatalf("onceq_submit_duration_seconds{queue=many} counts %d of %d submissions, want %d", got, n*9/10, want)
	}
}

// TestSubmitInvalid checks that every kind of invalid task is refused
// before anything is written, with an error that still matches the root
// package's kind.
func TestSubmitInvalid(t *testing.T) {
	reg := prometheus.NewRegistry()
	conn, p := setup(t, []string{"jobs"}, producer.Registerer(reg), producer.MaxMessageBytes(4096))
	ctx := ctxT(t)
	past := time.Now().Add(-time.Hour)
	for _, tc := range []struct {
		name string
		task onceq.Task
		kind error
	}{
		{"empty queue", onceq.Task{}, onceq.ErrInvalidQueue},
		{"bad queue", onceq.Task{Queue: "a b"}, onceq.ErrInvalidQueue},
		{"reserved queue", onceq.Task{Queue: "onceq-x"}, onceq.ErrReservedQueue},
		{"bad id", onceq.Task{Queue: "jobs", ID: "has space"}, onceq.ErrInvalidID},
		{"negative delay", onceq.Task{Queue: "jobs", Delay: -time.Second}, onceq.ErrNegativeDelay},
		{"due and delay", onceq.Task{Queue: "jobs", Delay: time.Second, Due: time.Now().Add(time.Hour)}, onceq.ErrInvalidTask},
		{"expires before due", onceq.Task{Queue: "jobs", Delay: time.Hour, Expires: time.Now()}, onceq.ErrExpiryBeforeDue},
		{"expires before due time", onceq.Task{Queue: "jobs", Due: time.Now(), Expires: past}, onceq.ErrExpiryBeforeDue},
		{"negative attempts", onceq.Task{Queue: "jobs", MaxAttempts: -1}, onceq.ErrInvalidTask},
		{"negative timeout", onceq.Task{Queue: "jobs", Timeout: -time.Second}, onceq.ErrInvalidTask},
		{"onceq header", onceq.Task{Queue: "jobs", Headers: []onceq.Header{{Key: "onceq-due", Value: []byte("1")}}}, onceq.ErrMalformedHeader},
		{"too large", onceq.Task{Queue: "jobs", Payload: make([]byte, 5000)}, onceq.ErrTooLarge},
		// Issue 17, bug 6: what the worker's decoder refuses is refused
		// here, not acknowledged and then dead-lettered as malformed.
		{"max attempts 2^31", onceq.Task{Queue: "jobs", MaxAttempts: 1 << 31}, onceq.ErrInvalidTask},
		{"due before 1970", onceq.Task{Queue: "jobs", Due: time.Date(1969, 7, 20, 20, 17, 0, 0, time.UTC)}, onceq.ErrInvalidTask},
		{"unknown onceq header", onceq.Task{Queue: "jobs", Headers: []onceq.Header{{Key: "onceq-delay", Value: []byte("5s")}}}, onceq.ErrMalformedHeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, err := p.Submit(ctx, tc.task)
			if !errors.Is(err, tc.kind) {
				t.Fatalf("Submit: %v, want %v", err, tc.kind)
			}
			var oe *onceq.Error
			if !errors.As(err, &oe) || !strings.HasPrefix(err.Error(), "producer: ") || strings.HasPrefix(err.Error(), "producer: onceq: ") {
				t.Fatalf("error %q: want a *onceq.Error prefixed \"producer: \" only", err)
			}
			if rc.Topic != "" {
				t.Fatalf("refused task has a receipt topic: %+v", rc)
			}
			var asyncErr error
			p.SubmitAsync(ctx, tc.task, func(_ producer.Receipt, err error) { asyncErr = err })
			if !errors.Is(asyncErr, tc.kind) {
				t.Fatalf("SubmitAsync: %v, want %v before it returns", asyncErr, tc.kind)
			}
		})
	}
	if got := readTasks(t, conn, "jobs"); len(got) != 0 {
		t.Fatalf("invalid tasks were written: %+v", got)
	}
	if got := metric(t, reg, "onceq_submit_errors_total", map[string]string{"queue": "jobs", "reason": "invalid"}); got != 2*12 {
		t.Errorf("onceq_submit_errors_total{queue=jobs,reason=invalid} = %v, want 24", got)
	}
	if got := metric(t, reg, "onceq_submit_errors_total", map[string]string{"queue": "", "reason": "invalid"}); got != 2*3 {
		t.Errorf("onceq_submit_errors_total{queue=\"\",reason=invalid} = %v, want 6 (invalid names are not labels)", got)
	}
}

func TestMissingQueue(t *testing.T) {
	conn, p := setup(t, nil)
	ctx := ctxT(t)
	_, err := p.Submit(ctx, onceq.Task{Queue: "nope"})
	if !errors.Is(err, producer.ErrQueueNotFound) || !strings.Contains(err.Error(), `onceq topics create nope`) {
		t.Fatalf("missing queue: %v, want ErrQueueNotFound telling how to create it", err)
	}
	// Created meanwhile: found once the short negative cache expires.
	testutil.CreateTopic(t, conn, "nope", 1)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err = p.Submit(ctx, onceq.Task{Queue: "nope"}); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("queue created after a refusal is still refused: %v", err)
	}

	p2, err := producer.New(producer.Conn(conn), producer.CreateQueues(3))
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if _, err := p2.Submit(ctx, onceq.Task{Queue: "created"}); err != nil {
		t.Fatal(err)
	}
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	info, err := adm.DescribeTopic(ctx, "created")
	if err != nil || len(info.Partitions) != 3 {
		t.Fatalf("CreateQueues(3): %+v %v", info, err)
	}
}

func TestDelayed(t *testing.T) {
	now := time.UnixMilli(1_900_000_000_000)
	conn, p := setup(t, []string{"jobs"}, producer.Now(func() time.Time { return now }))
	ctx := ctxT(t)
	for _, tc := range []struct {
		task   onceq.Task
		topic  string
		due    time.Time
		onTime bool // due now or earlier: straight to the queue
	}{
		{task: onceq.Task{Delay: 90 * time.Second}, topic: "onceq-delay-30s", due: now.Add(90 * time.Second)},
		{task: onceq.Task{Due: now.Add(25 * time.Hour)}, topic: "onceq-delay-1d", due: now.Add(25 * time.Hour)},
		{task: onceq.Task{Delay: 300 * time.Millisecond}, topic: "onceq-delay-1s", due: now.Add(300 * time.Millisecond)},
		{task: onceq.Task{Delay: time.Millisecond}, topic: "onceq-delay-1s", due: now.Add(time.Millisecond)},
		{task: onceq.Task{Due: now}, topic: "jobs", due: now, onTime: true},
		{task: onceq.Task{Due: now.Add(-time.Hour)}, topic: "jobs", due: now.Add(-time.Hour), onTime: true},
	} {
		task := tc.task
		task.Queue = "jobs"
		rc, err := p.Submit(ctx, task)
		if err != nil {
			t.Fatal(err)
		}
		if rc.Topic != tc.topic || rc.Delayed == tc.onTime {
			t.Errorf("task %+v: receipt %+v, want topic %s", tc.task, rc, tc.topic)
			continue
		}
		recs := testutil.ReadSettled(t, conn, 20*time.Second, tc.topic)
		var r *kgo.Record
		for _, rr := range recs {
			if id, _ := header(rr, onceq.HeaderID); id == rc.ID {
				r = rr
			}
		}
		if r == nil {
			t.Fatalf("task %s not found in %s", rc.ID, tc.topic)
		}
		queue, hasQueue := header(r, onceq.HeaderQueue)
		due, _ := header(r, onceq.HeaderDue)
		if tc.onTime == hasQueue || (!tc.onTime && queue != "jobs") {
			t.Errorf("task in %s: onceq-queue %q (present %v)", tc.topic, queue, hasQueue)
		}
		if want := itoa(tc.due.UnixMilli()); due != want {
			t.Errorf("task in %s: onceq-due %s, want %s", tc.topic, due, want)
		}
	}
	// Kafka stamps bucket records with their append time; the embedded
	// broker keeps the writer's time, which the delay service then uses.
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	info, err := adm.DescribeTopic(ctx, "onceq-delay-30s")
	if err != nil || len(info.Partitions) != delay.DefaultBucketPartitions || info.Configs["message.timestamp.type"] != "LogAppendTime" {
		t.Fatalf("bucket topic created as %+v (%v)", info, err)
	}
}

func TestDelayedCustomLadder(t *testing.T) {
	conn, p := setup(t, []string{"jobs"}, producer.Buckets(100*time.Millisecond, 500*time.Millisecond, 2*time.Second))
	rc, err := p.Submit(ctxT(t), onceq.Task{Queue: "jobs", Delay: 1200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rc.Topic != "onceq-delay-500ms" || !rc.Delayed {
		t.Fatalf("receipt %+v, want onceq-delay-500ms", rc)
	}
	if got := readTasks(t, conn, "onceq-delay-500ms"); len(got) != 1 || got[0].Queue != "jobs" {
		t.Fatalf("bucket holds %+v", got)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, p := setup(t, []string{"jobs"}, producer.Registerer(reg))
	p2, err := producer.New(producer.Brokers("127.0.0.1:1"), producer.Registerer(reg))
	if err != nil {
		t.Fatalf("a second producer on one registry: %v", err)
	}
	p2.Close()
	ctx := ctxT(t)
	for i := 0; i < 3; i++ {
		if _, err := p.Submit(ctx, onceq.Task{Queue: "jobs"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Submit(ctx, onceq.Task{Queue: "jobs", Delay: time.Minute}); err != nil {
		t.Fatal(err)
	}
	_, _ = p.Submit(ctx, onceq.Task{Queue: "missing"})
	if got := metric(t, reg, "onceq_tasks_submitted_total", map[string]string{"queue": "jobs"}); got != 4 {
		t.Errorf("onceq_tasks_submitted_total{queue=jobs} = %v, want 4 (delayed tasks count for their queue)", got)
	}
	if got := metric(t, reg, "onceq_submit_errors_total", map[string]string{"queue": "missing", "reason": "no_queue"}); got != 1 {
		t.Errorf("onceq_submit_errors_total{queue=missing,reason=no_queue} = %v, want 1", got)
	}
	// The duration is sampled: a queue's first submission, then one in
	// producer.LatencySample.
	if n := histogramCount(t, reg, "onceq_submit_duration_seconds", "jobs"); n != 1 {
		t.Errorf("onceq_submit_duration_seconds{queue=jobs} counts %d of 4 submissions, want 1", n)
	}
	for range producer.LatencySample {
		if _, err := p.Submit(ctx, onceq.Task{Queue: "jobs"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := histogramCount(t, reg, "onceq_submit_duration_seconds", "jobs"); n != 2 {
		t.Errorf("onceq_submit_duration_seconds{queue=jobs} counts %d of %d submissions, want 2", n, 4+producer.LatencySample)
	}
	ctx2, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Submit(ctx2, onceq.Task{Queue: "other"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Submit with a canceled context: %v", err)
	}
	if got := metric(t, reg, "onceq_submit_errors_total", map[string]string{"queue": "other", "reason": "canceled"}); got != 1 {
		t.Errorf("onceq_submit_errors_total{queue=other,reason=canceled} = %v, want 1", got)
	}
}

// TestMetricsAggregated: with MetricsPerQueue off, every queue's tasks
// count in one series, queue "*", and no series names a queue.
func TestMetricsAggregated(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, p := setup(t, []string{"a", "b"}, producer.Registerer(reg), producer.MetricsPerQueue(false))
	ctx := ctxT(t)
	for _, q := range []string{"a", "b", "b"} {
		if _, err := p.Submit(ctx, onceq.Task{Queue: q}); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = p.Submit(ctx, onceq.Task{Queue: "missing"})
	if got := metric(t, reg, "onceq_tasks_submitted_total", map[string]string{"queue": "*"}); got != 3 {
		t.Errorf("onceq_tasks_submitted_total{queue=*} = %v, want 3", got)
	}
	if got := metric(t, reg, "onceq_submit_errors_total", map[string]string{"queue": "*", "reason": "no_queue"}); got != 1 {
		t.Errorf("onceq_submit_errors_total{queue=*,reason=no_queue} = %v, want 1", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" && l.GetValue() != "*" {
					t.Errorf("%s has a series of queue %q", mf.GetName(), l.GetValue())
				}
			}
		}
	}
}

func TestClose(t *testing.T) {
	_, p := setup(t, []string{"jobs"})
	ctx := ctxT(t)
	var asyncErr error
	done := make(chan struct{})
	p.SubmitAsync(ctx, onceq.Task{Queue: "jobs"}, func(_ producer.Receipt, err error) { asyncErr = err; close(done) })
	p.Close()
	<-done
	if asyncErr != nil {
		t.Fatalf("a task buffered before Close failed: %v", asyncErr)
	}
	p.Close()
	if _, err := p.Submit(ctx, onceq.Task{Queue: "jobs"}); !errors.Is(err, producer.ErrClosed) {
		t.Fatalf("Submit after Close: %v, want ErrClosed", err)
	}
	if err := p.Tx(ctx, func(*producer.Tx) error { return nil }); !errors.Is(err, producer.ErrClosed) {
		t.Fatalf("Tx after Close: %v, want ErrClosed", err)
	}
}

func TestOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		opt  producer.Opt
		want string
	}{
		{producer.Linger(-1), "Linger -1ns"},
		{producer.MaxBufferedRecords(0), "MaxBufferedRecords 0"},
		{producer.TaskMaxAttempts(-1), "TaskMaxAttempts -1"},
		{producer.TaskMaxAttempts(1 << 31), "TaskMaxAttempts 2147483648: want zero (the worker's default) or 1 to 2147483647"},
		{producer.TaskTimeout(1500 * time.Microsecond), "TaskTimeout 1.5ms"},
		{producer.TaskPriority(-1), "TaskPriority -1: want 0 (the default, the lowest) to 9 (the highest)"},
		{producer.TaskPriority(10), "TaskPriority 10: want 0 (the default, the lowest) to 9"},
		{producer.CreateQueues(-2), "CreateQueues -2"},
		{producer.CreateQueues(100_000), "CreateQueues 100000: want zero (refuse missing queues) or a partition count from 1 to 10000"},
		{producer.Buckets(time.Second, time.Second), "bucket 1s appears twice"},
		{producer.Planner(nil), "nil planner"},
		{producer.MaxMessageBytes(10), "MaxMessageBytes 10"},
		{producer.Now(nil), "nil clock"},
		{producer.TransactionalID(""), "TransactionalID: empty"},
		{producer.TxTimeout(time.Millisecond), "TxTimeout 1ms"},
		{producer.Brokers("nohost"), "broker address"},
	} {
		_, err := producer.New(tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "producer: ") {
			t.Errorf("New with a bad option: %v, want an error containing %q", err, tc.want)
		}
	}
	// Every refused option is reported at once, each by its name.
	_, err := producer.New(producer.Linger(-1), producer.MaxBufferedRecords(0), producer.TxTimeout(0))
	var names []string
	for _, oe := range onceq.Options(err) {
		names = append(names, oe.Option)
	}
	if got := strings.Join(names, ","); got != "Linger,MaxBufferedRecords,TxTimeout" {
		t.Errorf("three bad options: reported %q (%v), want all three", got, err)
	}
	if _, err := producer.New(producer.Linger(-1)); !errors.Is(err, producer.ErrConfig) {
		t.Errorf("bad option error %v does not match ErrConfig", err)
	}
	if _, err := producer.New(producer.Brokers("nohost")); !errors.Is(err, broker.ErrConfig) {
		t.Errorf("bad broker error %v does not match broker.ErrConfig", err)
	}
}

// metric returns the value of one labelled counter series in reg, or 0.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// histogramCount returns the sample count of a histogram's queue series.
func histogramCount(t *testing.T, reg *prometheus.Registry, name, queue string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == name && len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == queue {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestSubmitAsyncNilCallback pins a crash: SubmitAsync with a nil callback
// panicked when the acknowledgment came.
func TestSubmitAsyncNilCallback(t *testing.T) {
	conn, p := setup(t, []string{"jobs"})
	ctx := ctxT(t)
	id := p.SubmitAsync(ctx, onceq.Task{Queue: "jobs", Payload: []byte("x")}, nil)
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p.SubmitAsync(ctx, onceq.Task{Queue: "a b"}, nil) // refused at once, also without a callback
	if got := readTasks(t, conn, "jobs"); len(got) != 1 || got[0].ID != id {
		t.Fatalf("read %d tasks, want the one submitted", len(got))
	}
}

// TestQueuesInTurn: tasks for queues in turn each reach their own queue
// (the producer remembers the last queue it routed a task to).
func TestQueuesInTurn(t *testing.T) {
	conn, p := setup(t, []string{"a", "b", "c"})
	ctx := ctxT(t)
	want := map[string]string{} // task ID -> queue
	for i := range 30 {
		q := []string{"a", "a", "b", "c", "b"}[i%5]
		rc, err := p.Submit(ctx, onceq.Task{Queue: q})
		if err != nil {
			t.Fatal(err)
		}
		want[rc.ID] = q
	}
	for _, q := range []string{"a", "b", "c"} {
		for _, task := range readTasks(t, conn, q) {
			if want[task.ID] != q {
				t.Errorf("task %s in %s, submitted to %q", task.ID, q, want[task.ID])
			}
			delete(want, task.ID)
		}
	}
	if len(want) > 0 {
		t.Errorf("%d tasks missing: %v", len(want), want)
	}
}
