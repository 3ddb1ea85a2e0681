package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

// TestOnDemandLaneQueues: an on-demand worker of a lane's queues fetches
// the lane while one of them is wanted, and holds the tasks of the others
// outside its two slots: lane queue ol/b's 23 tasks wait while ol/a's run,
// and start on ol/b's Want, once each, those of one key in order. With
// OnDemandLine(5), lane queue om/c holds 5 of its 12 tasks and the
// handler gets the other 7 as they come. A lane queue wanted by short
// Wants, each renewing the last (as onceq serve's consumers do), keeps
// its lane fetched past the first one's end.
func TestOnDemandLaneQueues(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "ol", 2)
	testutil.CreateTopic(t, conn, "om", 2)
	testutil.CreateTopic(t, conn, "on", 2)
	p := newProducer(t, conn)
	start := func(lane string, opts ...consumer.Opt) (*consumer.Worker, *runCounter, *prometheus.Registry) {
		t.Helper()
		reg := prometheus.NewRegistry()
		c := newRunCounter()
		w, err := consumer.New(append([]consumer.Opt{consumer.Conn(conn), consumer.Group("od-" + lane), consumer.Queues(lane + "/.+"),
			consumer.CheckpointDir(t.TempDir()), consumer.Registerer(reg), consumer.OnDemand(true), consumer.Concurrency(2),
			consumer.WithHandler(consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
				c.add(task.ID)
				return nil
			}))}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return w, c, reg
	}

	w, c, reg := start("ol")
	forever := time.Now().Add(time.Hour)
	w.Want("ol/a", forever)
	runUntilCleanup(t, w)
	var b, keyed []string
	for i := range 20 {
		b = append(b, fmt.Sprint("b-", i))
	}
	submitAll(t, p, "ol/b", b...)
	for i := range 3 {
		id := fmt.Sprint("k-", i)
		keyed = append(keyed, id)
		if _, err := p.Submit(t.Context(), onceq.Task{ID: id, Queue: "ol/b", Key: []byte("k")}); err != nil {
			t.Fatal(err)
		}
	}
	a := []string{"a-0", "a-1", "a-2", "a-3", "a-4"}
	submitAll(t, p, "ol/a", a...)
	c.waitRan(t, time.Minute, nil, a...)
	// Held: the 20 keyless tasks and k-0; k-1 and k-2 wait behind k-0.
	waitMetric(t, reg, "onceq_unwanted_waiting_tasks", 21)
	for _, id := range append(b, keyed...) {
		if n := c.count(id); n != 0 {
			t.Fatalf("%s of ol/b, which nobody wants, ran %d times", id, n)
		}
	}
	w.Want("ol/b", forever)
	c.waitRan(t, time.Minute, nil, append(b, keyed...)...)
	waitMetric(t, reg, "onceq_unwanted_waiting_tasks", 0)
	for _, id := range append(append(b, keyed...), a...) {
		if n := c.count(id); n != 1 {
			t.Errorf("%s ran %d times, want once", id, n)
		}
	}
	c.mu.Lock()
	order := slices.DeleteFunc(slices.Clone(c.order), func(id string) bool { return !slices.Contains(keyed, id) })
	c.mu.Unlock()
	if !slices.Equal(order, keyed) {
		t.Errorf("key k ran in the order %v, want %v", order, keyed)
	}

	w, c, reg = start("om", consumer.OnDemandLine(5))
	w.Want("om/d", forever)
	runUntilCleanup(t, w)
	var cs []string
	for i := range 12 {
		cs = append(cs, fmt.Sprint("c-", i))
	}
	submitAll(t, p, "om/c", cs...)
	submitAll(t, p, "om/d", "d-0", "d-1")
	c.waitRan(t, time.Minute, nil, "d-0", "d-1")
	waitMetric(t, reg, "onceq_unwanted_waiting_tasks", 5)
	ranUnwanted := 0
	for _, id := range cs {
		ranUnwanted += c.count(id)
	}
	for deadline := time.Now().Add(time.Minute); ranUnwanted != 7; {
		if time.Now().After(deadline) {
			t.Fatalf("%d tasks of om/c ran while nobody wanted it, want the 7 past its line of 5", ranUnwanted)
		}
		time.Sleep(10 * time.Millisecond)
		ranUnwanted = 0
		for _, id := range cs {
			ranUnwanted += c.count(id)
		}
	}
	w.Want("om/c", forever)
	c.waitRan(t, time.Minute, nil, cs...)
	for _, id := range cs {
		if n := c.count(id); n != 1 {
			t.Errorf("%s ran %d times, want once", id, n)
		}
	}

	w, c, _ = start("on")
	renew := func() { w.Want("on/x", time.Now().Add(300*time.Millisecond)) }
	renew()
	runUntilCleanup(t, w)
	first := []string{"x-0"}
	submitAll(t, p, "on/x", first...)
	c.waitRan(t, time.Minute, renew, first...)
	// Renewed past the first Want's end, every 50 ms of a second.
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		renew()
		time.Sleep(50 * time.Millisecond)
	}
	submitAll(t, p, "on/x", "x-1", "x-2")
	c.waitRan(t, time.Minute, renew, "x-1", "x-2")
}
