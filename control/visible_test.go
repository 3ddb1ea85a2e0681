package control_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/control"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// TestTasksVisibleFromSubmission: with no worker running, a task the Go
// producer submits (Submit, SubmitAsync, SubmitMany, a Tx) is known from
// its submission: Get answers pending, or scheduled with its due time,
// Counts counts it, and a cancel of a scheduled one is written
// (CancelPending), not refused as unknown. A worker and a delay service
// started afterwards run the immediate tasks and end the canceled ones
// canceled without running them. A producer with Records(false) leaves
// its task unknown, as before.
func TestTasksVisibleFromSubmission(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "q", 2)
	ladder, err := delay.NewPlanner([]time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p, err := producer.New(producer.Conn(conn), producer.Planner(ladder))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ctx := ctxT(t)
	const delayed = 3 * time.Second
	now := func(id string) onceq.Task { return onceq.Task{Queue: "q", ID: id, Payload: []byte(id)} }
	later := func(id string) onceq.Task {
		return onceq.Task{Queue: "q", ID: id, Payload: []byte(id), Delay: delayed}
	}
	submitted := time.Now()
	for _, task := range []onceq.Task{now("submit-now"), later("submit-later")} {
		if _, err := p.Submit(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var asyncErr error
	for _, task := range []onceq.Task{now("async-now"), later("async-later")} {
		p.SubmitAsync(ctx, task, func(_ producer.Receipt, err error) {
			mu.Lock()
			asyncErr = errors.Join(asyncErr, err)
			mu.Unlock()
		})
	}
	p.SubmitMany(ctx, []onceq.Task{now("many-now"), later("many-later")}, func(_ int, _ producer.Receipt, err error) {
		mu.Lock()
		asyncErr = errors.Join(asyncErr, err)
		mu.Unlock()
	})
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if asyncErr != nil {
		t.Fatal(asyncErr)
	}
	if err := p.Tx(ctx, func(tx *producer.Tx) error {
		return errors.Join(tx.Submit(now("tx-now")), tx.Submit(later("tx-later")))
	}); err != nil {
		t.Fatal(err)
	}
	bare, err := producer.New(producer.Conn(conn), producer.Records(false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bare.Submit(ctx, now("unrecorded")); err != nil {
		t.Fatal(err)
	}
	bare.Close()

	ctl := open(t, conn)
	in := ctl.Inspector()
	ways := []string{"submit", "async", "many", "tx"}
	for _, way := range ways {
		r, err := in.Get(ctx, "q", way+"-now")
		if err != nil || r.State != onceq.StatePending || r.Worker != "" {
			t.Fatalf("%s-now before any worker: %+v, %v; want pending", way, r, err)
		}
		r, err = in.Get(ctx, "q", way+"-later")
		if err != nil || r.State != onceq.StateScheduled {
			t.Fatalf("%s-later before any worker: %+v, %v; want scheduled", way, r, err)
		}
		if r.Due.Before(submitted.Add(delayed)) || r.Due.After(time.Now().Add(delayed)) {
			t.Errorf("%s-later due %v, want %v after its submission at %v", way, r.Due, delayed, submitted)
		}
	}
	if r, err := in.Get(ctx, "q", "unrecorded"); !errors.Is(err, inspect.ErrNotFound) {
		t.Fatalf("a task of a producer without records: %+v, %v; want not found", r, err)
	}
	counts, err := in.Counts(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if counts[onceq.StatePending] != 4 || counts[onceq.StateScheduled] != 4 {
		t.Fatalf("counts before any worker: %v, want 4 pending and 4 scheduled", counts)
	}
	for _, way := range ways {
		// Due about when the cancel's wait ends: it may say so.
		a, err := ctl.Cancel(ctx, "q", way+"-later")
		if err != nil || a.Outcome != control.CancelPending && a.Outcome != control.CancelDone {
			t.Fatalf("cancel of %s-later: %+v, %v; want %s or %s", way, a, err, control.CancelPending, control.CancelDone)
		}
	}
	// Due later, they cannot be running: their records end canceled at
	// once, before any worker reaches them.
	for _, way := range ways {
		if r, err := in.Wait(ctx, "q", way+"-later"); err != nil || r.State != onceq.StateCanceled || r.Worker != "" {
			t.Fatalf("%s-later once canceled, before any worker: %+v, %v; want canceled", way, r, err)
		}
	}
	if counts, err = in.Counts(ctx, "q"); err != nil || counts[onceq.StateCanceled] != 4 || counts[onceq.StateScheduled] != 0 {
		t.Fatalf("counts once the scheduled tasks are canceled: %v, %v; want 4 canceled, none scheduled", counts, err)
	}

	var ranMu sync.Mutex
	ran := map[string]int{}
	h := consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
		ranMu.Lock()
		ran[task.ID]++
		ranMu.Unlock()
		return nil
	})
	run(t, "worker", consumer.New, consumer.Conn(conn), consumer.Queues("q"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h), consumer.Planner(ladder))
	run(t, "delay service", delay.NewService, delay.Conn(conn), delay.WithPlanner(ladder), delay.StateDir(t.TempDir()))
	wctx, cancel := context.WithTimeout(ctx, 25*time.Second)
	defer cancel()
	for _, way := range ways {
		if r, err := in.Wait(wctx, "q", way+"-now"); err != nil || r.State != onceq.StateSucceeded {
			t.Fatalf("%s-now: %+v, %v; want succeeded", way, r, err)
		}
		byWorker := func(r onceq.TaskRecord) bool { return r.Worker != "" }
		if r, err := in.WaitFor(wctx, "q", way+"-later", byWorker); err != nil || r.State != onceq.StateCanceled {
			t.Fatalf("%s-later once a worker reached it: %+v, %v; want canceled", way, r, err)
		}
	}
	ranMu.Lock()
	defer ranMu.Unlock()
	for _, way := range ways {
		if ran[way+"-now"] != 1 || ran[way+"-later"] != 0 {
			t.Errorf("%s: ran now %d times and later %d times, want once and never", way, ran[way+"-now"], ran[way+"-later"])
		}
	}
}
