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
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/ctltopic"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// TestLaneKeysStayInTheirQueue: a lane queue's tasks wait behind no task
// of another lane queue, whatever their keys: on a lane of one partition
// whose queue fn/a is paused, fn/b's tasks of the same ID (keyed by their
// queue and ID), of the same key given by their writer, keyed by their
// bare ID as another client may write them, or whose key fn/a's task
// took for its own, all run while fn/a's wait; resumed, fn/a's run once
// each.
func TestLaneKeysStayInTheirQueue(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "fn", 1)
	ctx := t.Context()
	if err := ctltopic.Write(ctx, conn, ctltopic.Entry{Queue: "fn/a", Paused: true, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	p := newProducer(t, conn)
	tasks := []onceq.Task{
		{ID: "j1", Queue: "fn/a"},
		{ID: "k-a", Queue: "fn/a", Key: []byte("k")},
		{ID: "j2", Queue: "fn/a", Key: []byte("j2")},
		{ID: "taker", Queue: "fn/a", Key: []byte("fn/b/j3")},
		{ID: "j1", Queue: "fn/b"},
		{ID: "k-b", Queue: "fn/b", Key: []byte("k")},
		{ID: "j2", Queue: "fn/b", Key: []byte("j2")},
		{ID: "j3", Queue: "fn/b"},
	}
	for _, task := range tasks {
		if _, err := p.Submit(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu  sync.Mutex
		ran = map[string]int{} // queue/ID -> runs
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
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("lane-keys"), consumer.Queues("fn/a", "fn/b"),
		consumer.CheckpointDir(t.TempDir()), consumer.Registerer(reg),
		consumer.WithHandler(consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			mu.Lock()
			defer mu.Unlock()
			ran[task.Queue+"/"+task.ID]++
			return nil
		})))
	waitFor(t, time.Minute, "fn/a's 4 tasks held by its pause", func() bool { return metricValue(t, reg, "onceq_paused_waiting_tasks") == 4 })
	waitFor(t, time.Minute, "fn/b's 4 tasks beside the paused fn/a's", func() bool { return count("fn/b/") == 4 })
	if n := count("fn/a/"); n != 0 {
		t.Fatalf("%d tasks of the paused fn/a ran", n)
	}
	if err := ctltopic.Write(ctx, conn, ctltopic.Entry{Queue: "fn/a", Paused: false, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "fn/a's 4 tasks once resumed", func() bool { return count("fn/a/") == 4 })
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
}

// TestLaneRecordsKeyedByBareID: records of lane queues keyed by their
// bare ID (as a client that does not key them by their queue writes them)
// run once each, on a lane of four partitions: their duplicates keyed so
// are settled, a retry keeps the key and runs once per attempt, and a
// delayed one comes back to its key's partition, where its duplicate that
// ran first is; the same IDs in another lane queue, keyed by queue and ID,
// are other tasks.
func TestLaneRecordsKeyedByBareID(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "up", 4)
	ctx := t.Context()
	p, err := producer.New(producer.Conn(conn), producer.Planner(testLadder))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	bare := func(id string, delay time.Duration) onceq.Task {
		return onceq.Task{ID: id, Queue: "up/a", Key: []byte(id), Delay: delay}
	}
	var tasks []onceq.Task
	for i := range 10 {
		id := fmt.Sprint("o-", i)
		tasks = append(tasks, bare(id, 0), bare(id, 0), onceq.Task{ID: id, Queue: "up/b"})
	}
	for i := range 5 {
		tasks = append(tasks, bare(fmt.Sprint("r-", i), 0), bare(fmt.Sprint("d-", i), 300*time.Millisecond), bare(fmt.Sprint("d-", i), 0))
	}
	for _, task := range tasks {
		if _, err := p.Submit(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu  sync.Mutex
		ran = map[string]int{} // queue/ID#attempt -> runs
	)
	reg := prometheus.NewRegistry()
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("bare-keys"), consumer.Queues("up/a", "up/b"),
		consumer.CheckpointDir(t.TempDir()), consumer.Registerer(reg),
		consumer.WithHandler(consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			mu.Lock()
			ran[fmt.Sprintf("%s/%s#%d", task.Queue, task.ID, task.Attempt)]++
			mu.Unlock()
			if strings.HasPrefix(task.ID, "r-") && task.Attempt == 1 {
				return errors.New("fails once")
			}
			return nil
		})))
	// 10 o-, 5 r- (twice), 5 d- of up/a and 10 of up/b; 15 duplicates.
	waitFor(t, time.Minute, "every task, and every duplicate settled", func() bool {
		mu.Lock()
		n := len(ran)
		mu.Unlock()
		return n == 35 && processed(t, reg, "duplicate") == 15
	})
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
	for i := range 5 {
		if k := fmt.Sprintf("up/a/r-%d#2", i); ran[k] != 1 {
			t.Errorf("%s: ran %d times, want its retry once", k, ran[k])
		}
	}
}

// TestLaneRecordWithoutKeyGoesHome: a record of a lane queue with an ID
// and no key, written by hand to another partition than its task's key
// (its queue and ID) maps to, is forwarded there, where the same task
// submitted through the producer is: each of the ten runs once.
func TestLaneRecordWithoutKeyGoesHome(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	const parts = 4
	testutil.CreateTopic(t, conn, "ln", parts)
	ctx := t.Context()
	cl, err := conn.NewClient(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	home := broker.KeyPartitioner().ForTopic("ln")
	var tasks []onceq.Task
	for i := range 10 {
		task := onceq.Task{ID: fmt.Sprint("f-", i), Queue: "ln/a"}
		p := int32((home.Partition(&kgo.Record{Key: task.PartitionKey()}, parts) + 1) % parts)
		r := &kgo.Record{Topic: "ln", Partition: p, Headers: []kgo.RecordHeader{
			{Key: onceq.HeaderID, Value: []byte(task.ID)}, {Key: onceq.HeaderQueue, Value: []byte(task.Queue)}}}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, task)
	}
	pr, err := producer.New(producer.Conn(conn))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	for _, task := range tasks {
		if _, err := pr.Submit(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu  sync.Mutex
		ran = map[string]int{}
	)
	reg := prometheus.NewRegistry()
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("home"), consumer.Queues("ln/a"),
		consumer.CheckpointDir(t.TempDir()), consumer.Registerer(reg),
		consumer.WithHandler(consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			mu.Lock()
			ran[task.ID]++
			mu.Unlock()
			return nil
		})))
	waitFor(t, time.Minute, "the 20 tasks run or settled as duplicates", func() bool {
		mu.Lock()
		runs := 0
		for _, n := range ran {
			runs += n
		}
		mu.Unlock()
		return float64(runs)+processed(t, reg, "duplicate") == 20
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := processed(t, reg, "forwarded"); n != 10 {
		t.Errorf("%v records forwarded, want the 10 written outside their key's partition", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, task := range tasks {
		if ran[task.ID] != 1 {
			t.Errorf("%s ran %d times, want once", task.ID, ran[task.ID])
		}
	}
}

// processed sums onceq_tasks_processed_total of outcome in reg.
func processed(t testing.TB, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "onceq_tasks_processed_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabel(m, "outcome", outcome) {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
