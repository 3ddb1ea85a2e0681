package consumer_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/ctltopic"
	"github.com/onceq/onceq/internal/testutil"
)

// TestPriorityLookahead: a worker that buffers 100 records drains a
// backlog of 3,000 tasks of priority 0, every tenth of them keyed (keys
// k0-k4), on a queue of four partitions, with 20 keyless tasks of
// priority 9 and 5 of priority 9 keyed k0-k4 behind it:
//   - burst: submitted once the worker runs the backlog;
//   - join: submitted with the backlog, before the worker starts, so that
//     the lookahead must restore the partitions its fetch has not reached;
//   - join-at-least-once: as join, under AtLeastOnce;
//   - join-kip848: as join, in a KIP-848 group, where the member's client
//     knows a partition only once it polled from it (the group has no
//     committed offsets yet): the results of the tasks run ahead on the
//     others wait for it, rather than the commit taking those partitions
//     for ones given away and the worker dropping them;
//   - off: as burst, without the lookahead (PriorityLookahead 0).
//
// With the lookahead, the keyless ones start while more than 1,000 of
// the backlog have yet to start, although the worker's fetch is 2,900
// records short of them; without it, they start after 2,000 or more.
// Either way each key's tasks start in submission order (a keyed priority
// task waits for the backlog tasks of its key), and every task runs and
// commits its output once.
func TestPriorityLookahead(t *testing.T) {
	for _, mode := range []string{"burst", "join", "join-at-least-once", "join-kip848", "off"} {
		on, join := mode != "off", strings.HasPrefix(mode, "join")
		guarantee, protocol := consumer.ExactlyOnce, consumer.ClassicGroup
		switch mode {
		case "join-at-least-once":
			guarantee = consumer.AtLeastOnce
		case "join-kip848":
			protocol = consumer.ConsumerGroup
		}
		t.Run(mode, func(t *testing.T) {
			_, conn := testutil.StartBroker(t, "")
			testutil.CreateTopic(t, conn, "la", 4)
			testutil.CreateTopic(t, conn, "la-out", 2)
			const backlog = 3000
			var (
				mu      sync.Mutex
				started []string
			)
			backlogStarts := func() int {
				mu.Lock()
				defer mu.Unlock()
				n := 0
				for _, id := range started {
					if strings.HasPrefix(id, "b-") {
						n++
					}
				}
				return n
			}
			copyOut := copyCounting("la-out")
			reg := prometheus.NewRegistry()
			lookahead := consumer.DefaultPriorityLookahead
			if !on {
				lookahead = 0
			}
			w, err := consumer.New(consumer.Conn(conn), consumer.Queues("la"), consumer.CheckpointDir(t.TempDir()),
				consumer.Registerer(reg), consumer.Concurrency(2), consumer.MaxBufferedRecords(100), consumer.PriorityLookahead(lookahead), consumer.WithGuarantee(guarantee), consumer.GroupProtocol(protocol),
				consumer.WithHandler(consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
					mu.Lock()
					started = append(started, task.ID)
					mu.Unlock()
					if strings.HasPrefix(task.ID, "b-") {
						time.Sleep(time.Millisecond)
					}
					return copyOut.Handle(ctx, task)
				})))
			if err != nil {
				t.Fatal(err)
			}
			p := newProducer(t, conn)
			var all []string
			submit := func(id string, priority int, key string) {
				task := onceq.Task{ID: id, Queue: "la", Priority: priority, Payload: []byte(id)}
				if key != "" {
					task.Key = []byte(key)
				}
				all = append(all, id)
				p.SubmitAsync(t.Context(), task, nil)
			}
			for i := range backlog {
				key := ""
				if i%10 == 0 {
					key = fmt.Sprintf("k%d", i/10%5)
				}
				submit(fmt.Sprintf("b-%04d", i), 0, key)
			}
			probes := func() {
				for i := range 20 {
					submit(fmt.Sprintf("p-%02d", i), onceq.MaxPriority, "")
				}
				for i := range 5 {
					submit(fmt.Sprintf("pk-%d", i), onceq.MaxPriority, fmt.Sprintf("k%d", i))
				}
				if err := p.Flush(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			if join {
				probes()
			} else if err := p.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
			runUntilCleanup(t, w)
			if !join {
				for deadline := time.Now().Add(time.Minute); backlogStarts() == 0; time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("the backlog did not start within a minute")
					}
				}
				probes()
			}
			checkExactlyOnce(t, waitOutputs(t, conn, "la-out", len(all), 3*time.Minute), all)

			mu.Lock()
			defer mu.Unlock()
			// The backlog tasks started before each priority task.
			before, seen := map[string]int{}, 0
			for _, id := range started {
				if strings.HasPrefix(id, "b-") {
					seen++
				} else {
					before[id] = seen
				}
			}
			for i := range 20 {
				id := fmt.Sprintf("p-%02d", i)
				if on && before[id] > backlog-1000 {
					t.Errorf("%s started after %d of the %d backlog tasks, want at most %d: it waited for the fetch", id, before[id], backlog, backlog-1000)
				}
				if !on && before[id] < 2000 {
					t.Errorf("%s started after %d of the %d backlog tasks without the lookahead, want 2,000 or more: the test does not tell", id, before[id], backlog)
				}
			}
			checkKeyOrder(t, started, all)
			ahead := metricValue(t, reg, "onceq_tasks_read_ahead_total")
			if on && ahead < 20 {
				t.Errorf("onceq_tasks_read_ahead_total %v, want the 20 keyless priority tasks at least", ahead)
			}
			if !on && ahead != 0 {
				t.Errorf("onceq_tasks_read_ahead_total %v without the lookahead, want 0", ahead)
			}
		})
	}
}

// checkKeyOrder checks that the tasks of each key of the lookahead test
// (the tenth backlog tasks, and pk-N of key kN) started in submission
// order, submitted being that order.
func checkKeyOrder(t *testing.T, started, submitted []string) {
	t.Helper()
	keyOf := func(id string) string {
		var i int
		if _, err := fmt.Sscanf(id, "b-%d", &i); err == nil && !strings.HasPrefix(id, "p") {
			if i%10 != 0 {
				return ""
			}
			return fmt.Sprintf("k%d", i/10%5)
		}
		if _, err := fmt.Sscanf(id, "pk-%d", &i); err == nil {
			return fmt.Sprintf("k%d", i)
		}
		return ""
	}
	order := func(ids []string) map[string][]string {
		m := map[string][]string{}
		for _, id := range ids {
			if k := keyOf(id); k != "" {
				m[k] = append(m[k], id)
			}
		}
		return m
	}
	want, got := order(submitted), order(started)
	for k, ids := range want {
		if fmt.Sprint(got[k]) != fmt.Sprint(ids) {
			t.Errorf("key %s started in the order %v, want %v", k, got[k], ids)
		}
	}
}

// TestCrashPriorityLookahead is TestCrashCopyExactlyOnce with a fifth of
// the tasks of priority 9, a tenth of them keyed, 5% submitted twice, and
// workers that buffer 64 records, so that the lookahead runs tasks ahead
// of the fetch while the workers are SIGKILLed: every ID must still run
// and commit its output once.
func TestCrashPriorityLookahead(t *testing.T) {
	rng := seededRand(t)
	n := 20_000
	if testing.Short() {
		n = 5_000
	}
	all := ids(n)
	tasks := make([]onceq.Task, 0, n+n/10)
	for _, id := range all {
		task := onceq.Task{ID: id, Payload: []byte("payload-" + id)}
		if rng.IntN(5) == 0 {
			task.Priority = onceq.MaxPriority
		}
		if rng.IntN(10) == 0 {
			task.Key = []byte(fmt.Sprintf("k%d", rng.IntN(50)))
		}
		tasks = append(tasks, task)
		if rng.Float64() < 0.05 {
			tasks = append(tasks, task)
		}
	}
	rng.Shuffle(len(tasks), func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })
	crashRun(t, rng, tasks, all, "--max-buffered", "64", "--concurrency", "8")
}

// TestLookaheadOnlyWithPriorities: behind a backlog, the lookahead reads
// nothing of a queue that has no tasks of a priority above 0, and starts
// in one once the worker's fetch meets such a task there, with no
// priority note to say so: every task here is written by a plain Kafka
// client, which writes no notes (TestPriorityLookahead's producer does).
//   - none: 3,000 tasks of priority 0;
//   - fetched: the same with one task of priority 9 near the start and 20
//     more behind the backlog, which then start ahead of the fetch.
func TestLookaheadOnlyWithPriorities(t *testing.T) {
	for _, mode := range []string{"none", "fetched"} {
		t.Run(mode, func(t *testing.T) {
			_, conn := testutil.StartBroker(t, "")
			testutil.CreateTopic(t, conn, "lp", 2)
			const backlog = 3000
			var tasks []onceq.Task
			for i := range backlog {
				tasks = append(tasks, onceq.Task{ID: fmt.Sprintf("b-%04d", i), Queue: "lp"})
				if mode == "fetched" && i == 10 {
					tasks = append(tasks, onceq.Task{ID: "p-first", Queue: "lp", Priority: onceq.MaxPriority})
				}
			}
			if mode == "fetched" {
				for i := range 20 {
					tasks = append(tasks, onceq.Task{ID: fmt.Sprintf("p-%02d", i), Queue: "lp", Priority: onceq.MaxPriority})
				}
			}
			cl, err := conn.NewClient()
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			now := time.Now()
			for i := range tasks {
				tasks[i].Resolve(now)
				if err := cl.ProduceSync(t.Context(), tasks[i].Record("lp")).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			var (
				mu      sync.Mutex
				started []string
			)
			reg := prometheus.NewRegistry()
			w, err := consumer.New(consumer.Conn(conn), consumer.Queues("lp"), consumer.CheckpointDir(t.TempDir()),
				consumer.Registerer(reg), consumer.Concurrency(2), consumer.MaxBufferedRecords(100),
				consumer.WithHandler(consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
					mu.Lock()
					started = append(started, task.ID)
					mu.Unlock()
					if strings.HasPrefix(task.ID, "b-") {
						time.Sleep(time.Millisecond)
					}
					return nil
				})))
			if err != nil {
				t.Fatal(err)
			}
			runUntilCleanup(t, w)
			for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
				mu.Lock()
				n := len(started)
				mu.Unlock()
				if n >= len(tasks) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d tasks started in 3 minutes", n, len(tasks))
				}
			}
			read := metricValue(t, reg, "onceq_lookahead_records_read_total")
			ahead := metricValue(t, reg, "onceq_tasks_read_ahead_total")
			if mode == "none" {
				if read != 0 || ahead != 0 {
					t.Fatalf("the lookahead read %v records and ran %v tasks ahead in a queue without priorities, want 0 and 0", read, ahead)
				}
				return
			}
			mu.Lock()
			defer mu.Unlock()
			seen, before := 0, map[string]int{}
			for _, id := range started {
				if strings.HasPrefix(id, "b-") {
					seen++
				} else {
					before[id] = seen
				}
			}
			for i := range 20 {
				if id := fmt.Sprintf("p-%02d", i); before[id] > backlog-1000 {
					t.Errorf("%s started after %d of the %d backlog tasks, want at most %d: the lookahead did not start once the fetch met p-first", id, before[id], backlog, backlog-1000)
				}
			}
			if read == 0 || ahead < 20 {
				t.Errorf("the lookahead read %v records and ran %v tasks ahead, want some and at least 20", read, ahead)
			}
		})
	}
}

// TestEmitNotesPriority: a task a handler emits with a priority above 0
// leaves a priority note of its queue's topic in the control topic, with
// the run's transaction, so that the workers of that queue read ahead of
// a backlog for it; one of priority 0 leaves none.
func TestEmitNotesPriority(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	for _, q := range []string{"src", "hi", "lo"} {
		testutil.CreateTopic(t, conn, q, 1)
	}
	w, err := consumer.New(consumer.Conn(conn), consumer.Queues("src"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
			if err := task.Emit(onceq.Task{Queue: "hi", Priority: 3}); err != nil {
				return err
			}
			return task.Emit(onceq.Task{Queue: "lo"})
		})))
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, w)
	p := newProducer(t, conn)
	if _, err := p.Submit(t.Context(), onceq.Task{ID: "a", Queue: "src"}); err != nil {
		t.Fatal(err)
	}
	waitOutputs(t, conn, "hi", 1, time.Minute)
	r, err := ctltopic.Open(t.Context(), conn, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !r.PriorityNoted("hi") || r.PriorityNoted("lo") || r.PriorityNoted("src") {
		t.Fatalf("priority notes: hi %v, lo %v, src %v; want true, false, false", r.PriorityNoted("hi"), r.PriorityNoted("lo"), r.PriorityNoted("src"))
	}
}
