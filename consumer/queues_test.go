package consumer_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

// TestQueuePattern: a worker of a pattern runs the tasks of every queue
// that matches it, a queue made after it started included (found through
// the wake-up of its first task), with the changelog exactly-once needs;
// it runs no task of a queue that does not match.
func TestQueuePattern(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "shop.a", 2)
	testutil.CreateTopic(t, conn, "shopping", 1)
	ran := make(chan string, 16)
	w, err := consumer.New(consumer.Conn(conn), consumer.Group("shops"), consumer.Queues(`shop\..*`), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			ran <- task.Topic + "/" + task.ID
			return nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, w)
	ctx := t.Context()
	p := newProducer(t, conn)
	wait := func(want string) {
		t.Helper()
		timeout := time.After(time.Minute)
		for {
			select {
			case got := <-ran:
				if got == want {
					return
				}
				if got[:len("shopping")] == "shopping" {
					t.Fatalf("ran %s, of a queue the pattern does not match", got)
				}
			case <-timeout:
				t.Fatalf("%s never ran", want)
			}
		}
	}
	submit := func(queue, id string) {
		t.Helper()
		if _, err := p.Submit(ctx, onceq.Task{ID: id, Queue: queue}); err != nil {
			t.Fatal(err)
		}
	}
	submit("shopping", "s1")
	submit("shop.a", "a1")
	wait("shop.a/a1")

	testutil.CreateTopic(t, conn, "shop.b", 1)
	submit("shop.b", "b1")
	wait("shop.b/b1")
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := adm.DescribeTopic(ctx, broker.ChangelogTopic("shops", "shop.b")); err != nil {
		t.Fatalf("the changelog of shop.b: %v", err)
	}
	submit("shopping", "s2")
	submit("shop.a", "a2")
	wait("shop.a/a2")
}

// TestQueuePatternRefused: a pattern that does not compile, or one beside
// onceq's own queue, is refused with the option's name.
func TestQueuePatternRefused(t *testing.T) {
	h := consumer.HandlerFunc(func(context.Context, *consumer.Task) error { return nil })
	for _, qs := range [][]string{{"shop[.*"}, {"shop.*", onceq.WorkflowQueue}} {
		_, err := consumer.New(consumer.Queues(qs...), consumer.CheckpointDir(t.TempDir()), consumer.WithHandler(h))
		if !errors.Is(err, consumer.ErrConfig) {
			t.Fatalf("queues %q: %v, want ErrConfig", qs, err)
		}
		t.Logf("queues %q: %v", qs, err)
	}
}

// TestMetricsPerQueueOff: with MetricsPerQueue(false) every series of the
// worker's metrics has queue "*", whatever queues it runs.
func TestMetricsPerQueueOff(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	for _, q := range []string{"m1", "m2", "m3"} {
		testutil.CreateTopic(t, conn, q, 2)
		produceTasks(t, conn, q, ids(5))
	}
	reg := prometheus.NewRegistry()
	var n atomic.Int64
	w, err := consumer.New(consumer.Conn(conn), consumer.Queues("m1", "m2", "m3"), consumer.CheckpointDir(t.TempDir()),
		consumer.Registerer(reg), consumer.MetricsPerQueue(false),
		consumer.WithHandler(consumer.HandlerFunc(func(context.Context, *consumer.Task) error {
			n.Add(1)
			return nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, w)
	processed := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		total := 0.0
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if (l.GetName() == "queue" || l.GetName() == "partition") && l.GetValue() != "*" {
						t.Fatalf("%s has %s=%q", mf.GetName(), l.GetName(), l.GetValue())
					}
				}
				if mf.GetName() == "onceq_tasks_processed_total" {
					total += m.GetCounter().GetValue()
				}
			}
		}
		return total
	}
	for deadline := time.Now().Add(time.Minute); processed() < 15; {
		if time.Now().After(deadline) {
			t.Fatalf("%v tasks counted processed after a minute (%d ran), want 15", processed(), n.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
