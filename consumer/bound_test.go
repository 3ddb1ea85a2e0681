package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

// TestMaxRunningPerQueue: with MaxRunningPerQueue(2) and 3 slots, queue A's
// handlers, blocked, hold 2 slots at most, and B's tasks run on the third
// meanwhile; once A's handlers are released every task of A runs, once,
// in key order. With lane queues l/qa and l/qb of one lane, each counts
// apart.
func TestMaxRunningPerQueue(t *testing.T) {
	t.Run("topics", func(t *testing.T) { testMaxRunningPerQueue(t, "qa", "qb") })
	t.Run("lane", func(t *testing.T) { testMaxRunningPerQueue(t, "l/qa", "l/qb") })
}

func testMaxRunningPerQueue(t *testing.T, qa, qb string) {
	_, conn := testutil.StartBroker(t, "")
	for _, q := range []string{qa, qb} {
		if !onceq.IsLaneQueue(q) || q == qa {
			testutil.CreateTopic(t, conn, onceq.QueueTopic(q), 2)
		}
	}
	const keys, perKey = 4, 5
	var aIDs, bIDs []string
	for i := range perKey {
		for k := range keys {
			aIDs = append(aIDs, fmt.Sprintf("a-k%d-%d", k, i))
		}
	}
	for i := range 10 {
		bIDs = append(bIDs, fmt.Sprintf("b-%d", i))
	}
	release := make(chan struct{})
	var mu sync.Mutex
	running, most := 0, 0
	c := newRunCounter()
	w, err := consumer.New(consumer.Conn(conn), consumer.Queues(qa, qb), consumer.CheckpointDir(t.TempDir()),
		consumer.Concurrency(3), consumer.MaxRunningPerQueue(2), consumer.TaskTimeout(5*time.Minute),
		consumer.WithHandler(consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
			if task.Queue != qa {
				c.add(task.ID)
				return nil
			}
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			defer func() {
				mu.Lock()
				running--
				mu.Unlock()
			}()
			c.add(task.ID)
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
	for _, id := range aIDs {
		task := onceq.Task{ID: id, Queue: qa, Key: []byte(id[:len("a-k0")])}
		if _, err := p.Submit(t.Context(), task); err != nil {
			t.Fatal(err)
		}
	}
	submitAll(t, p, qb, bIDs...)
	runUntilCleanup(t, w)

	c.waitRan(t, time.Minute, nil, bIDs...)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		r := running
		mu.Unlock()
		if r == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tasks of qa running after a minute, want 2", r)
		}
	}
	close(release)
	c.waitRan(t, time.Minute, nil, aIDs...)
	mu.Lock()
	defer mu.Unlock()
	if most > 2 {
		t.Fatalf("%d tasks of qa ran at once, want 2 at most", most)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	next := map[string]int{}
	for _, id := range c.order {
		if id[0] != 'a' {
			continue
		}
		var k, i int
		if _, err := fmt.Sscanf(id, "a-k%d-%d", &k, &i); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprint(k)
		if i != next[key] {
			t.Fatalf("%s started out of its key's order (%v)", id, c.order)
		}
		next[key]++
	}
	for _, id := range append(aIDs, bIDs...) {
		if c.runs[id] != 1 {
			t.Fatalf("%s ran %d times, want once", id, c.runs[id])
		}
	}
}

// TestMaxRunningPerQueueShutdown: tasks waiting for their queue's bound
// when the worker stops never start there; they stay uncommitted, and the
// partition's next owner runs every task once.
func TestMaxRunningPerQueueShutdown(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "qs", 1)
	all := ids(6) // each its own key: nothing but the bound keeps them apart
	p := newProducer(t, conn)
	submitAll(t, p, "qs", all...)

	first := newRunCounter()
	started := make(chan struct{}, 1)
	reg := prometheus.NewRegistry()
	w1, err := consumer.New(consumer.Conn(conn), consumer.Group("gs"), consumer.Queues("qs"), consumer.CheckpointDir(t.TempDir()),
		consumer.Registerer(reg), consumer.Concurrency(3), consumer.MaxRunningPerQueue(1), consumer.ShutdownTimeout(0),
		consumer.WithHandler(consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
			first.add(task.ID)
			select {
			case started <- struct{}{}:
			default: // a second start fails the test below
			}
			<-ctx.Done()
			return ctx.Err()
		})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w1.Run(ctx) }()
	waitMetric(t, reg, "onceq_bound_waiting_tasks", float64(len(all)-1))
	// The task that holds the bound may be between the bound and its
	// slot's handler: stopped there, it is dropped rather than canceled.
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("no task started on the first worker within a minute")
	}
	cancel()
	if err := <-done; !errors.Is(err, consumer.ErrTasksCanceled) {
		t.Fatalf("the first worker's Run returned %v, want ErrTasksCanceled", err)
	}
	first.mu.Lock()
	if len(first.order) != 1 {
		t.Fatalf("the first worker started %v, want one task", first.order)
	}
	first.mu.Unlock()

	second := newRunCounter()
	w2, err := consumer.New(consumer.Conn(conn), consumer.Group("gs"), consumer.Queues("qs"), consumer.CheckpointDir(t.TempDir()),
		consumer.MaxRunningPerQueue(1), consumer.WithHandler(consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			second.add(task.ID)
			return nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, w2)
	second.waitRan(t, time.Minute, nil, all...)
	for _, id := range all {
		if n := second.count(id); n != 1 {
			t.Fatalf("%s ran %d times on the second worker, want once", id, n)
		}
	}
}

// TestYieldQueuePlace: with MaxRunningPerQueue(1), handlers that yield
// their place (twice: the second does nothing) all run at once; then the
// queue's bound still holds: of the handlers that do not yield, one runs
// at a time.
func TestYieldQueuePlace(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "q", 1)
	release := make(chan struct{})
	var mu sync.Mutex
	held, most := 0, 0
	c := newRunCounter()
	w, err := consumer.New(consumer.Conn(conn), consumer.Queues("q"), consumer.CheckpointDir(t.TempDir()),
		consumer.Concurrency(8), consumer.MaxRunningPerQueue(1), consumer.TaskTimeout(5*time.Minute),
		consumer.WithHandler(consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
			if task.ID[0] == 'y' {
				task.YieldQueuePlace()
				task.YieldQueuePlace()
				c.add(task.ID)
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			mu.Lock()
			held++
			most = max(most, held)
			mu.Unlock()
			c.add(task.ID)
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			held--
			mu.Unlock()
			return nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	p := newProducer(t, conn)
	yielding := []string{"y-0", "y-1", "y-2", "y-3", "y-4"}
	submitAll(t, p, "q", yielding...)
	runUntilCleanup(t, w)
	c.waitRan(t, time.Minute, nil, yielding...) // all at once: none has returned
	holding := []string{"h-0", "h-1", "h-2", "h-3", "h-4", "h-5"}
	submitAll(t, p, "q", holding...)
	c.waitRan(t, time.Minute, nil, holding...)
	close(release)
	mu.Lock()
	defer mu.Unlock()
	if most != 1 {
		t.Fatalf("%d tasks that keep their place ran at once after 5 yielded theirs; want 1 (the queue's bound)", most)
	}
}
