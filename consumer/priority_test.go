package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

// TestPriority: with its one slot held by a blocked task, a worker that
// has fetched 31 tasks of priority 0, 5 of priority 5 and 10 of priority 9
// (submitted in that order) starts, once the slot frees, the 10, then the
// 5, then the rest, each priority in submission order; and the three
// tasks of key k, of priorities 0, 9 and 5, still run in their order.
// The metric onceq_ready_tasks shows the waiting tasks by priority.
func TestPriority(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "pq", 1)
	reg := prometheus.NewRegistry()
	c := newRunCounter()
	release := make(chan struct{})
	w, err := consumer.New(consumer.Conn(conn), consumer.Queues("pq"), consumer.CheckpointDir(t.TempDir()),
		consumer.Registerer(reg), consumer.Concurrency(1), consumer.TaskTimeout(5*time.Minute),
		consumer.WithHandler(consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
			c.add(task.ID)
			if task.ID != "gate" {
				return nil
			}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})))
	if err != nil {
		t.Fatal(err)
	}
	p := newProducer(t, conn)
	submit := func(id string, priority int, key string) {
		t.Helper()
		task := onceq.Task{ID: id, Queue: "pq", Priority: priority}
		if key != "" {
			task.Key = []byte(key)
		}
		if _, err := p.Submit(t.Context(), task); err != nil {
			t.Fatal(err)
		}
	}
	// The gate holds the slot before the others are fetched: fetched
	// together, the priority-9 tasks would start first, before it.
	submit("gate", 0, "")
	runUntilCleanup(t, w)
	c.waitRan(t, time.Minute, nil, "gate")
	var low, mid, high []string
	for i := range 30 {
		low = append(low, fmt.Sprintf("lo-%02d", i))
		submit(low[i], 0, "")
	}
	submit("k-0", 0, "k")
	submit("k-1", onceq.MaxPriority, "k")
	submit("k-2", 5, "k")
	for i := range 5 {
		mid = append(mid, fmt.Sprintf("mid-%d", i))
		submit(mid[i], 5, "")
	}
	for i := range 10 {
		high = append(high, fmt.Sprintf("hi-%d", i))
		submit(high[i], onceq.MaxPriority, "")
	}
	// Everything fetched: k-1 and k-2 wait for k-0, the others for the slot.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		got := readyTasks(t, reg)
		if got["0"] == 31 && got["5"] == 5 && got["9"] == 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("onceq_ready_tasks after a minute: %v, want 31 of priority 0, 5 of 5 and 10 of 9", got)
		}
	}
	close(release)
	all := append(append(append([]string{"k-0", "k-1", "k-2"}, low...), mid...), high...)
	c.waitRan(t, time.Minute, nil, all...)

	c.mu.Lock()
	order := slices.Clone(c.order)
	c.mu.Unlock()
	if len(order) != 1+len(all) {
		t.Fatalf("%d runs, want %d: %v", len(order), 1+len(all), order)
	}
	if got := order[1 : 1+len(high)]; !slices.Equal(got, high) {
		t.Fatalf("after the gate, started %v; want the priority-9 tasks first, in their order: %v", got, high)
	}
	if got := order[1+len(high) : 1+len(high)+len(mid)]; !slices.Equal(got, mid) {
		t.Fatalf("then started %v; want the priority-5 tasks, in their order: %v", got, mid)
	}
	var lows []string
	for _, id := range order {
		if strings.HasPrefix(id, "lo-") {
			lows = append(lows, id)
		}
	}
	if !slices.Equal(lows, low) {
		t.Fatalf("priority-0 tasks ran in the order %v, want their submission order", lows)
	}
	k0, k1, k2 := slices.Index(order, "k-0"), slices.Index(order, "k-1"), slices.Index(order, "k-2")
	if k0 >= k1 || k1 >= k2 {
		t.Fatalf("key k's tasks ran in the order %v, want k-0, k-1, k-2 (their submission order, whatever their priorities)", order)
	}
	if got := readyTasks(t, reg); got["0"]+got["5"]+got["9"] != 0 {
		t.Fatalf("onceq_ready_tasks after every task ran: %v, want none", got)
	}
}

// readyTasks reads onceq_ready_tasks by priority.
func readyTasks(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "onceq_ready_tasks" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	if len(out) != onceq.MaxPriority+1 {
		t.Fatalf("onceq_ready_tasks has %d priorities, want %d", len(out), onceq.MaxPriority+1)
	}
	return out
}

// TestPriorityKeptThroughRetries: a task of priority 7, delayed, that
// fails twice runs three times, each with priority 7: its retries go
// through the delay topics and keep it.
func TestPriorityKeptThroughRetries(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "pr", 1)
	seen := make(chan int, 3)
	stop := runWorker(t, consumer.Conn(conn), consumer.Queues("pr"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
			seen <- task.Priority
			if task.Attempt < 3 {
				return fmt.Errorf("attempt %d fails", task.Attempt)
			}
			return nil
		})))
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	p := newProducer(t, conn)
	if _, err := p.Submit(t.Context(), onceq.Task{ID: "r-1", Queue: "pr", Priority: 7, Delay: 200 * time.Millisecond, MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= 3; attempt++ {
		select {
		case got := <-seen:
			if got != 7 {
				t.Fatalf("attempt %d ran with priority %d, want 7", attempt, got)
			}
		case <-time.After(time.Minute):
			t.Fatalf("attempt %d did not run within a minute", attempt)
		}
	}
}
