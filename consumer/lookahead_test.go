package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
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
			p, err := producer.New(producer.Conn(conn))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
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
