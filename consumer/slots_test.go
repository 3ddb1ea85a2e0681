package consumer_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

// TestManySlotsStartAsNeeded: a worker of 50,000 slots starts a goroutine
// for a slot only when a record finds every started one busy. Idle, it
// runs a few hundred goroutines, not 50,000; with 3,000 handlers that
// block, every one of them runs at once (none waits behind a busy slot
// while the worker could start another), and each task runs once.
func TestManySlotsStartAsNeeded(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 4)
	testutil.CreateTopic(t, conn, "out", 1)
	const slots, tasks = 50_000, 3_000
	var running, peak atomic.Int64
	release := make(chan struct{})
	out := copyCounting("out")
	h := consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		select {
		case <-release:
		case <-ctx.Done():
			running.Add(-1)
			return ctx.Err()
		}
		running.Add(-1)
		return out.Handle(ctx, task)
	})
	before := runtime.NumGoroutine()
	w, err := consumer.New(consumer.Conn(conn), consumer.Group("slots"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h), consumer.Concurrency(slots), consumer.MaxBufferedRecords(slots),
		consumer.TaskTimeout(5*time.Minute), consumer.CommitInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, w)
	for deadline := time.Now().Add(60 * time.Second); w.Ready() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 60s: %v", w.Ready())
		}
	}
	idle := runtime.NumGoroutine() - before
	if idle > 2_000 {
		t.Fatalf("an idle worker of %d slots runs %d goroutines; want its slots started as records need them", slots, idle)
	}

	want := ids(tasks)
	produceTasks(t, conn, "in", want)
	for deadline := time.Now().Add(2 * time.Minute); running.Load() < tasks; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d blocking handlers run at once after 2 min, with %d slots; want all of them", running.Load(), tasks, slots)
		}
	}
	g := runtime.NumGoroutine() - before
	if g > tasks+2_000 {
		t.Errorf("%d goroutines run %d handlers; want about one for each", g, tasks)
	}
	t.Logf("goroutines of the worker: %d idle, %d with %d handlers running", idle, g, tasks)
	close(release)
	checkExactlyOnce(t, waitOutputs(t, conn, "out", tasks, 2*time.Minute), want)
	if p := peak.Load(); p != tasks {
		t.Errorf("at most %d handlers ran at once; want %d", p, tasks)
	}
}
