package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// runCounter is a handler's record of the tasks it ran: how many times
// each, and the order they started in.
type runCounter struct {
	mu    sync.Mutex
	runs  map[string]int
	order []string
	ran   chan string
}

func newRunCounter() *runCounter {
	return &runCounter{runs: map[string]int{}, ran: make(chan string, 1024)}
}

func (c *runCounter) add(id string) {
	c.mu.Lock()
	c.runs[id]++
	c.order = append(c.order, id)
	c.mu.Unlock()
	c.ran <- id
}

func (c *runCounter) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[id]
}

// waitRan waits until every one of ids ran, calling tick (if any) every
// 50ms meanwhile, and fails the test after timeout.
func (c *runCounter) waitRan(t testing.TB, timeout time.Duration, tick func(), ids ...string) {
	t.Helper()
	end := time.After(timeout)
	every := time.NewTicker(50 * time.Millisecond)
	defer every.Stop()
	for {
		missing := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return c.count(id) > 0 })
		if len(missing) == 0 {
			return
		}
		select {
		case <-c.ran:
		case <-every.C:
			if tick != nil {
				tick()
			}
		case <-end:
			t.Fatalf("tasks %v never ran", missing)
		}
	}
}

// waitMetric waits until the metric name is want, for at most a minute.
func waitMetric(t testing.TB, reg *prometheus.Registry, name string, want float64) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		got := metricValue(t, reg, name)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v after a minute, want %v", name, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// newProducer is a producer on conn, closed when the test ends.
func newProducer(t testing.TB, conn broker.Conn) *producer.Producer {
	t.Helper()
	p, err := producer.New(producer.Conn(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func submitAll(t testing.TB, p *producer.Producer, queue string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := p.Submit(context.Background(), onceq.Task{ID: id, Queue: queue}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOnDemand: an on-demand worker starts no task of a queue nobody wants,
// though its producer's wake-ups name it; a Want starts them; once the
// want lapses, new tasks wait for the next Want; every task runs once in
// the end. Queue ctl, wanted throughout, shows the worker fetching: its
// tasks, submitted after the waiting ones, run while those wait.
func TestOnDemand(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "dq", 2)
	testutil.CreateTopic(t, conn, "ctl", 1)
	reg := prometheus.NewRegistry()
	c := newRunCounter()
	w, err := consumer.New(consumer.Conn(conn), consumer.Queues("dq", "ctl"), consumer.CheckpointDir(t.TempDir()),
		consumer.Registerer(reg), consumer.OnDemand(true), consumer.QuietAfter(500*time.Millisecond),
		consumer.WithHandler(consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			c.add(task.ID)
			return nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	w.Want("ctl", time.Now().Add(time.Hour))
	w.Want("elsewhere", time.Now().Add(time.Hour)) // not a queue of the worker: nothing
	runUntilCleanup(t, w)
	p := newProducer(t, conn)
	for deadline := time.Now().Add(time.Minute); !w.Owns("dq") || !w.Owns("ctl"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the worker owns no partition of dq or ctl after a minute")
		}
	}
	if w.Owns("elsewhere") {
		t.Fatal("the worker owns a queue it does not consume")
	}
	waitMetric(t, reg, "onceq_wanted_queues", 1)
	// Quiet first, so that the wake-ups of dq's tasks find its partitions
	// quiet and wake them, which must not fetch them.
	waitMetric(t, reg, "onceq_quiet_partitions", 3)

	ctlRound := 0
	notWanted := func(ids ...string) {
		t.Helper()
		for range 2 {
			ctlRound++
			id := fmt.Sprintf("ctl-%d", ctlRound)
			submitAll(t, p, "ctl", id)
			c.waitRan(t, time.Minute, nil, id)
		}
		for _, id := range ids {
			if n := c.count(id); n > 0 {
				t.Fatalf("%s of a queue nobody wants ran %d times", id, n)
			}
		}
	}
	want := func() { w.Want("dq", time.Now().Add(500*time.Millisecond)) }

	first := ids(6)
	submitAll(t, p, "dq", first...)
	notWanted(first...)
	want()
	c.waitRan(t, time.Minute, want, first...)

	waitMetric(t, reg, "onceq_wanted_queues", 1) // dq's want lapsed
	second := []string{"late-1", "late-2", "late-3"}
	submitAll(t, p, "dq", second...)
	notWanted(second...)
	want()
	c.waitRan(t, time.Minute, want, second...)

	for _, id := range append(first, second...) {
		if n := c.count(id); n != 1 {
			t.Fatalf("%s ran %d times, want once", id, n)
		}
	}
}

// TestOnDemandNewQueues: on-demand, the partitions of a queue that a
// pattern finds while the worker runs start unfetched unless wanted: dp.a,
// not wanted, runs nothing until its Want; dp.b, wanted before it exists,
// runs its first task.
func TestOnDemandNewQueues(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "dp.ctl", 1)
	c := newRunCounter()
	w, err := consumer.New(consumer.Conn(conn), consumer.Group("dp"), consumer.Queues(`dp\..*`), consumer.CheckpointDir(t.TempDir()),
		consumer.OnDemand(true),
		consumer.WithHandler(consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			c.add(task.ID)
			return nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	w.Want("dp.ctl", time.Now().Add(time.Hour))
	w.Want("dp.b", time.Now().Add(time.Hour))
	runUntilCleanup(t, w)
	p := newProducer(t, conn)
	submitAll(t, p, "dp.ctl", "ctl-0")
	c.waitRan(t, time.Minute, nil, "ctl-0")

	testutil.CreateTopic(t, conn, "dp.a", 1)
	submitAll(t, p, "dp.a", "a-0")
	for deadline := time.Now().Add(time.Minute); !w.Owns("dp.a"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the worker owns no partition of dp.a a minute after its first task")
		}
	}
	for i := 1; i <= 2; i++ {
		id := fmt.Sprintf("ctl-%d", i)
		submitAll(t, p, "dp.ctl", id)
		c.waitRan(t, time.Minute, nil, id)
	}
	if n := c.count("a-0"); n > 0 {
		t.Fatalf("a-0, of a new queue nobody wants, ran %d times", n)
	}
	testutil.CreateTopic(t, conn, "dp.b", 1)
	submitAll(t, p, "dp.b", "b-0")
	c.waitRan(t, time.Minute, nil, "b-0")
	w.Want("dp.a", time.Now().Add(time.Hour))
	c.waitRan(t, time.Minute, nil, "a-0")
}

// BenchmarkWantLatency measures, on an on-demand worker, the time from the
// Want of a queue whose task waits to the start of the task's handler:
// each round submits a task while the queue is not wanted, wants it,
// and waits for its want to lapse.
func BenchmarkWantLatency(b *testing.B) {
	_, conn := testutil.StartBroker(b, "")
	testutil.CreateTopic(b, conn, "lat", 1)
	reg := prometheus.NewRegistry()
	started := make(chan time.Time, 1)
	w, err := consumer.New(consumer.Conn(conn), consumer.Queues("lat"), consumer.CheckpointDir(b.TempDir()),
		consumer.Registerer(reg), consumer.OnDemand(true),
		consumer.WithHandler(consumer.HandlerFunc(func(context.Context, *consumer.Task) error {
			started <- time.Now()
			return nil
		})))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	p, err := producer.New(producer.Conn(conn))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	for deadline := time.Now().Add(time.Minute); !w.Owns("lat"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the worker owns no partition of lat after a minute")
		}
	}
	// The want is short, so that rounds are short, and renewed while the
	// task has not started, so that a loaded machine only makes a round
	// slower.
	round := func(i int) time.Duration {
		submitAll(b, p, "lat", fmt.Sprintf("t-%d", i))
		at := time.Now()
		w.Want("lat", at.Add(300*time.Millisecond))
		renew := time.NewTicker(100 * time.Millisecond)
		defer renew.Stop()
		timeout := time.After(time.Minute)
		for {
			select {
			case s := <-started:
				if s.Before(at) {
					b.Fatalf("task t-%d started before its queue was wanted", i)
				}
				waitMetric(b, reg, "onceq_wanted_queues", 0)
				return s.Sub(at)
			case now := <-renew.C:
				w.Want("lat", now.Add(300*time.Millisecond))
			case <-timeout:
				b.Fatalf("task t-%d did not start within a minute of its queue's Want", i)
			}
		}
	}
	round(-1) // the partition restores from its changelog on its first record
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		lat = append(lat, round(i))
	}
	b.StopTimer()
	slices.Sort(lat)
	ms := func(q float64) float64 {
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkWant is the cost of a Want of a queue already wanted, from
// many goroutines at once: what every HTTP consume request pays.
func BenchmarkWant(b *testing.B) {
	w, err := consumer.New(consumer.Queues("q"), consumer.CheckpointDir(b.TempDir()), consumer.OnDemand(true),
		consumer.WithHandler(consumer.HandlerFunc(func(context.Context, *consumer.Task) error { return nil })))
	if err != nil {
		b.Fatal(err)
	}
	until := time.Now().Add(time.Hour)
	w.Want("q", until)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w.Want("q", until)
		}
	})
}
