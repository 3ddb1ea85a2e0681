package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/ctltopic"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// TestLaneQueues: a worker of lane queues, one by name and others by a
// pattern of labels, reads their lane and runs each of their tasks once,
// in its own queue, even where two queues use the same IDs; a duplicate
// of a lane queue's ID is not run again. It runs no task of the lane's
// other queues, nor of the lane's topic as a queue of its own. The task
// records name each task's queue.
func TestLaneQueues(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	var (
		mu  sync.Mutex
		ran = map[string]int{} // queue/ID -> runs
	)
	reg := prometheus.NewRegistry()
	w, err := consumer.New(consumer.Conn(conn), consumer.Group("lanes"), consumer.Queues("fn/resize", `fn/m.*`),
		consumer.CheckpointDir(t.TempDir()), consumer.Registerer(reg),
		consumer.WithHandler(consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			if task.Topic != "fn" {
				return fmt.Errorf("task %s of %s came from topic %s", task.ID, task.Queue, task.Topic)
			}
			mu.Lock()
			ran[task.Queue+"/"+task.ID]++
			mu.Unlock()
			if task.ID == "bad" {
				return consumer.SkipRetry(errors.New("told to fail"))
			}
			return nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	p, err := producer.New(producer.Conn(conn), producer.CreateQueues(2))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := t.Context()
	submit := func(task onceq.Task) {
		t.Helper()
		if _, err := p.Submit(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	const n = 20
	submit(onceq.Task{ID: "first", Queue: "fn/resize"}) // creates the lane before the worker starts
	runUntilCleanup(t, w)
	for i := range n {
		id := fmt.Sprintf("x%d", i)
		submit(onceq.Task{ID: id, Queue: "fn/resize"})
		submit(onceq.Task{ID: id, Queue: "fn/mail"})
		submit(onceq.Task{ID: id, Queue: "fn/other"})
		submit(onceq.Task{ID: id, Queue: "fn"})
	}
	count := func(key string) int {
		mu.Lock()
		defer mu.Unlock()
		return ran[key]
	}
	waitFor(t, time.Minute, "every task of fn/resize and fn/mail to run", func() bool {
		for i := range n {
			if count(fmt.Sprintf("fn/resize/x%d", i)) == 0 || count(fmt.Sprintf("fn/mail/x%d", i)) == 0 {
				return false
			}
		}
		return true
	})
	// A duplicate of x1, then a task of the same key (a lane queue's task
	// is keyed by its queue and ID): once that one ran, the duplicate was
	// settled.
	dup := onceq.Task{ID: "x1", Queue: "fn/resize"}
	submit(dup)
	submit(onceq.Task{ID: "after", Queue: "fn/resize", Key: dup.PartitionKey()})
	submit(onceq.Task{ID: "bad", Queue: "fn/mail"}) // dead-lettered
	waitFor(t, time.Minute, "the task after the duplicate", func() bool { return count("fn/resize/after") == 1 })
	waitFor(t, time.Minute, "the task that fails", func() bool { return count("fn/mail/bad") == 1 })

	mu.Lock()
	for key, runs := range ran {
		if runs != 1 {
			t.Errorf("%s ran %d times", key, runs)
		}
	}
	if len(ran) != 2*n+3 {
		t.Errorf("%d tasks ran, want %d: %v", len(ran), 2*n+3, ran)
	}
	mu.Unlock()

	// The records of a commit become visible with it: every task's, the
	// dead one's too, whose commit counted it in the metrics before.
	var succeeded map[string]int
	waitFor(t, time.Minute, "the task records of every task", func() bool {
		succeeded = map[string]int{}
		dead := false
		for _, r := range testutil.ReadCommitted(t, conn, time.Minute, broker.RecordsTopic("fn/resize")) {
			trs, err := onceq.DecodeTaskRecords(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			for _, tr := range trs {
				switch {
				case tr.State == onceq.StateSucceeded:
					succeeded[tr.Queue+"/"+tr.ID]++
				case tr.State == onceq.StateDead && tr.Queue == "fn/mail" && tr.ID == "bad":
					dead = true
				}
			}
		}
		return len(succeeded) >= len(ran)-1 && dead
	})
	for key := range ran {
		want := 1
		if key == "fn/mail/bad" {
			want = 0
		}
		if succeeded[key] != want {
			t.Errorf("%s: %d succeeded records, want %d", key, succeeded[key], want)
		}
	}
	if len(succeeded) != len(ran)-1 {
		t.Errorf("%d succeeded records, want %d", len(succeeded), len(ran)-1)
	}
	// The metrics are the lane's: its labels add no series. The dead
	// letter commits after the handler ran, maybe after the others'
	// records were read.
	var success, dead float64
	waitFor(t, time.Minute, "the metrics of every task", func() bool {
		success, dead = laneMetrics(t, reg)
		return success >= float64(len(ran)-1) && dead >= 1
	})
	if success != float64(len(ran)-1) || dead != 1 {
		t.Errorf("%v tasks succeeded and %v dead in the metrics, want %d and 1", success, dead, len(ran)-1)
	}
}

// laneMetrics sums the tasks that succeeded and the dead letters in reg's
// metrics, failing the test on a series of another queue than the lane fn.
func laneMetrics(t *testing.T, reg *prometheus.Registry) (success, dead float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" && l.GetValue() != "fn" {
					t.Fatalf("%s has a series of queue %q: want the lane's, fn", mf.GetName(), l.GetValue())
				}
			}
			switch {
			case mf.GetName() == "onceq_tasks_processed_total" && hasLabel(m, "outcome", "success"):
				success += m.GetCounter().GetValue()
			case mf.GetName() == "onceq_dead_letters_total":
				dead += m.GetCounter().GetValue()
			}
		}
	}
	return success, dead
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: still not after %v", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPausedLaneQueueHoldsNoSlot: the tasks of a paused lane queue wait
// outside the slots, so a worker of two slots whose lane holds 40 of
// them ahead of another lane queue's tasks runs those; resumed, the
// paused queue's tasks run once each, those of one key in order.
func TestPausedLaneQueueHoldsNoSlot(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "fn", 2)
	ctx := t.Context()
	if err := ctltopic.Write(ctx, conn, ctltopic.Entry{Queue: "fn/a", Paused: true, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	p := newProducer(t, conn)
	var tasks []onceq.Task
	for i := range 40 {
		tasks = append(tasks, onceq.Task{ID: fmt.Sprint("a-", i), Queue: "fn/a"})
	}
	for i := range 5 {
		tasks = append(tasks, onceq.Task{ID: fmt.Sprint("k-", i), Queue: "fn/a", Key: []byte("k")})
	}
	for i := range 20 {
		tasks = append(tasks, onceq.Task{ID: fmt.Sprint("b-", i), Queue: "fn/b"})
	}
	for _, task := range tasks {
		if _, err := p.Submit(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu    sync.Mutex
		ran   = map[string]int{} // queue/ID -> runs
		order []string           // the IDs of key k, as they ran
	)
	count := func(prefix string) (n int) {
		mu.Lock()
		defer mu.Unlock()
		for k := range ran {
			if strings.HasPrefix(k, prefix) {
				n++
			}
		}
		return n
	}
	reg := prometheus.NewRegistry()
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("paused-lane"), consumer.Queues("fn/a", "fn/b"),
		consumer.CheckpointDir(t.TempDir()), consumer.Concurrency(2), consumer.Registerer(reg),
		consumer.WithHandler(consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			mu.Lock()
			defer mu.Unlock()
			ran[task.Queue+"/"+task.ID]++
			if string(task.Key) == "k" {
				order = append(order, task.ID)
			}
			return nil
		})))
	waitFor(t, time.Minute, "the 20 tasks of fn/b behind the paused fn/a's", func() bool { return count("fn/b/") == 20 })
	// Held: the 40 keyless tasks and k-0; k-1 to k-4 wait behind k-0.
	waitFor(t, time.Minute, "41 tasks of fn/a held outside the slots", func() bool { return metricValue(t, reg, "onceq_paused_waiting_tasks") == 41 })
	if n := count("fn/a/"); n != 0 {
		t.Fatalf("%d tasks of the paused fn/a ran", n)
	}
	if err := ctltopic.Write(ctx, conn, ctltopic.Entry{Queue: "fn/a", Paused: false, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the 45 tasks of fn/a once resumed", func() bool { return count("fn/a/") == 45 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, n := range ran {
		if n != 1 {
			t.Errorf("%s ran %d times", k, n)
		}
	}
	if fmt.Sprint(order) != "[k-0 k-1 k-2 k-3 k-4]" {
		t.Errorf("key k ran in the order %v", order)
	}
	if g := metricValue(t, reg, "onceq_paused_waiting_tasks"); g != 0 {
		t.Errorf("onceq_paused_waiting_tasks = %v after the resume", g)
	}
}
