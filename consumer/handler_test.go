package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

// TestHandlerPanicIsAFailure: a panicking handler does not kill the worker;
// the task counts as failed and runs again until it succeeds.
func TestHandlerPanicIsAFailure(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	testutil.CreateTopic(t, conn, "out", 1)
	produceTasks(t, conn, "in", []string{"p-1", "p-2"})
	var runs atomic.Int64
	h := consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
		if task.ID == "p-1" && runs.Add(1) <= 2 {
			panic("boom")
		}
		return copyCounting("out").Handle(ctx, task)
	})
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("gp"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h), consumer.RetryPause(10*time.Millisecond))
	waitOutputs(t, conn, "out", 2, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := runs.Load(); got != 3 {
		t.Fatalf("p-1 ran %d times, want 3 (two panics, then success)", got)
	}
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, 10*time.Second, "out"), []string{"p-1", "p-2"})
}

// TestHandlerTimeoutCancelsContext: a handler past its time-to-run sees
// its context canceled, the run fails and the task runs again.
func TestHandlerTimeoutCancelsContext(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	testutil.CreateTopic(t, conn, "out", 1)
	produceTasks(t, conn, "in", []string{"slow"})
	var runs atomic.Int64
	var sawDeadline atomic.Bool
	h := consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
		if runs.Add(1) == 1 {
			<-ctx.Done()
			sawDeadline.Store(errors.Is(ctx.Err(), context.DeadlineExceeded))
			return ctx.Err()
		}
		return copyCounting("out").Handle(ctx, task)
	})
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("gt"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h), consumer.TaskTimeout(200*time.Millisecond), consumer.RetryPause(10*time.Millisecond))
	waitOutputs(t, conn, "out", 1, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !sawDeadline.Load() || runs.Load() != 2 {
		t.Fatalf("deadline seen %v, runs %d; want the first run timed out and a second one", sawDeadline.Load(), runs.Load())
	}
}

// TestShutdownDrainsInFlight: on cancel, a running handler finishes and its
// task is committed before Run returns; nothing runs again afterwards.
func TestShutdownDrainsInFlight(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	testutil.CreateTopic(t, conn, "out", 1)
	produceTasks(t, conn, "in", []string{"drain-1"})
	started := make(chan struct{})
	release := make(chan struct{})
	var runs atomic.Int64
	h := consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
		if runs.Add(1) == 1 {
			close(started)
			<-release
		}
		return copyCounting("out").Handle(ctx, task)
	})
	dir := t.TempDir()
	opts := []consumer.Opt{consumer.Conn(conn), consumer.Group("gd"), consumer.Queues("in"), consumer.CheckpointDir(dir),
		consumer.WithHandler(h), consumer.ShutdownTimeout(20 * time.Second)}
	stop := runWorker(t, opts...)
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	time.Sleep(300 * time.Millisecond) // the worker is draining
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) before the in-flight handler finished", err)
	default:
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if recs := testutil.ReadCommitted(t, conn, 10*time.Second, "out"); len(recs) != 1 {
		t.Fatalf("after a drained shutdown the output has %d records, want 1", len(recs))
	}
	// A new worker on the same checkpoint finds nothing to run.
	stop2 := runWorker(t, opts...)
	time.Sleep(2 * time.Second)
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	if got := runs.Load(); got != 1 {
		t.Fatalf("the drained task ran %d times, want 1", got)
	}
}

// TestSkipRetryDeadLetters: a SkipRetry error, even wrapped, sends the task
// to its dead letters with the error text instead of running it again.
func TestSkipRetryDeadLetters(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	produceTasks(t, conn, "in", []string{"bad"})
	var runs atomic.Int64
	h := consumer.HandlerFunc(func(context.Context, *consumer.Task) error {
		runs.Add(1)
		return fmt.Errorf("wrapped: %w", consumer.SkipRetry(errors.New("invalid address")))
	})
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("gs"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h), consumer.RetryPause(10*time.Millisecond))
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if recs, err := testutil.ReadCommittedErr(conn, 5*time.Second, "onceq-dlq-in"); err == nil && len(recs) == 1 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	recs := testutil.ReadCommitted(t, conn, 10*time.Second, "onceq-dlq-in")
	if len(recs) != 1 || runs.Load() != 1 {
		t.Fatalf("dead letters %d, runs %d; want 1 and 1", len(recs), runs.Load())
	}
	var reason string
	for _, h := range recs[0].Headers {
		if h.Key == "onceq-error" {
			reason = string(h.Value)
		}
	}
	if reason != "failed: wrapped: invalid address" {
		t.Fatalf("onceq-error %q", reason)
	}
}

// TestShutdownCancelsTasksPastTheTimeout: a task still running at the
// shutdown timeout has its context canceled, Run returns soon after with
// ErrTasksCanceled, the task's result is dropped (no retry is scheduled,
// nothing is committed past it), and it runs again, once, on restart.
func TestShutdownCancelsTasksPastTheTimeout(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	testutil.CreateTopic(t, conn, "out", 1)
	produceTasks(t, conn, "in", []string{"before", "long", "after"})
	started := make(chan struct{})
	var runs atomic.Int64
	var canceledWith atomic.Value
	h := consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
		if task.ID == "long" && runs.Add(1) == 1 {
			close(started)
			select {
			case <-ctx.Done():
				canceledWith.Store(ctx.Err())
				return ctx.Err()
			case <-time.After(30 * time.Second):
			}
		}
		return copyCounting("out").Handle(ctx, task)
	})
	dir := t.TempDir()
	opts := []consumer.Opt{consumer.Conn(conn), consumer.Group("gc"), consumer.Queues("in"), consumer.CheckpointDir(dir),
		consumer.WithHandler(h), consumer.ShutdownTimeout(time.Second), consumer.CommitInterval(20 * time.Millisecond)}
	stop := runWorker(t, opts...)
	<-started
	waitOutputs(t, conn, "out", 2, 30*time.Second) // before and after
	begin := time.Now()
	err := stop()
	took := time.Since(begin)
	if !errors.Is(err, consumer.ErrTasksCanceled) {
		t.Fatalf("Run returned %v, want ErrTasksCanceled", err)
	}
	if took > 10*time.Second {
		t.Fatalf("Run took %v to return with a 1s shutdown timeout", took)
	}
	if got, _ := canceledWith.Load().(error); !errors.Is(got, context.Canceled) {
		t.Fatalf("the long task's context ended with %v, want context.Canceled", got)
	}
	if recs, _ := testutil.ReadCommittedErr(conn, 5*time.Second, "onceq-dlq-in"); len(recs) != 0 {
		t.Fatalf("%d dead letters: the canceled run counted as a failure", len(recs))
	}
	stop2 := runWorker(t, opts...)
	waitOutputs(t, conn, "out", 3, 30*time.Second)
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	if got := runs.Load(); got != 2 {
		t.Fatalf("the long task ran %d times, want 2 (canceled, then once on restart)", got)
	}
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, 10*time.Second, "out"), []string{"before", "long", "after"})
}

// TestWorkerReadyWithAnIdlePartition: a partition restores on its first
// record, so one that never gets any was never restored, and the worker
// was never ready.
func TestWorkerReadyWithAnIdlePartition(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 2)
	w, err := consumer.New(consumer.Conn(conn), consumer.Group("idle"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(consumer.HandlerFunc(func(context.Context, *consumer.Task) error { return nil })),
		consumer.SessionTimeout(6*time.Second), consumer.TransactionTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	produceTasks(t, conn, "in", ids(1)) // one partition gets a record, the other none
	deadline := time.Now().Add(30 * time.Second)
	for w.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 30s with one partition idle: %v", w.Ready())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestWorkerHealth: a worker is healthy before Run and while it reaches
// its brokers, ready once it joined and restored its partitions, and
// unhealthy when the brokers go away (its /healthz used to answer ok
// regardless).
func TestWorkerHealth(t *testing.T) {
	testutil.NeedsEmbedded(t, "closes the broker under a running worker")
	emb, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 2)
	w, err := consumer.New(consumer.Conn(conn), consumer.Group("gh"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(consumer.HandlerFunc(func(context.Context, *consumer.Task) error { return nil })),
		consumer.SessionTimeout(6*time.Second), consumer.TransactionTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if w.Healthy() != nil || w.Ready() == nil {
		t.Fatalf("before Run: healthy %v, ready %v; want nil and an error", w.Healthy(), w.Ready())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	produceTasks(t, conn, "in", ids(10)) // a partition restores on its first record
	deadline := time.Now().Add(30 * time.Second)
	for w.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 30s: %v", w.Ready())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := w.Healthy(); err != nil {
		t.Fatalf("ready but unhealthy: %v", err)
	}
	emb.Close()
	for w.Healthy() == nil {
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatal("still healthy with the broker gone")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("with the broker gone: %v", w.Healthy())
	cancel()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return")
	}
	if w.Healthy() == nil {
		t.Fatal("healthy after Run returned")
	}
}
