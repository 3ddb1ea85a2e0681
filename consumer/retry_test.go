package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

// runTimes records when each task ID ran.
type runTimes struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (r *runTimes) add(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at = map[string][]time.Time{}
	}
	r.at[id] = append(r.at[id], time.Now())
	return len(r.at[id])
}

func (r *runTimes) get(id string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time{}, r.at[id]...)
}

func TestRetryWithBackoffThenSuccess(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 2)
	testutil.CreateTopic(t, conn, "out", 2)
	produceTasks(t, conn, "in", []string{"flaky"})
	var runs runTimes
	h := consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
		if n := runs.add(task.ID); n <= 2 {
			return errors.New("transient " + strings.Repeat("!", n))
		}
		if task.Attempt != 3 || task.LastError != "transient !!" {
			return consumer.SkipRetry(errors.New("unexpected attempt or last error"))
		}
		return copyCounting("out").Handle(ctx, task)
	})
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("gr"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h), consumer.Backoff(300*time.Millisecond, 2, 5*time.Second))
	waitOutputs(t, conn, "out", 1, 30*time.Second)
	time.Sleep(500 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	at := runs.get("flaky")
	if len(at) != 3 {
		t.Fatalf("ran %d times, want 3", len(at))
	}
	for i, min := range []time.Duration{300 * time.Millisecond, 600 * time.Millisecond} {
		if gap := at[i+1].Sub(at[i]); gap < min {
			t.Errorf("retry %d came %v after the failure, before its backoff of %v", i+1, gap, min)
		}
	}
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, 10*time.Second, "out"), []string{"flaky"})
}

func TestAlwaysFailingEndsInDeadLetters(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	produceTasks(t, conn, "in", []string{"doomed"})
	var runs atomic.Int64
	h := consumer.HandlerFunc(func(context.Context, *consumer.Task) error {
		runs.Add(1)
		return errors.New("smtp: 550 mailbox unavailable")
	})
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("gf"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h), consumer.MaxAttempts(3), consumer.Backoff(50*time.Millisecond, 1, 50*time.Millisecond))
	waitRecords(t, conn, "onceq-dlq-in", 1, 30*time.Second)
	time.Sleep(500 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 3 {
		t.Fatalf("ran %d times, want 3 (max attempts)", runs.Load())
	}
	dead := testutil.ReadCommitted(t, conn, 10*time.Second, "onceq-dlq-in")
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	task, err := onceq.FromRecord(dead[0])
	if err != nil {
		t.Fatal(err)
	}
	if task.ID != "doomed" || task.Queue != "in" || task.Attempt != 3 || task.Failed.IsZero() ||
		task.LastError != "max_attempts: attempt 3 of 3: smtp: 550 mailbox unavailable" || string(task.Payload) != "payload-doomed" {
		t.Fatalf("dead letter %+v", task)
	}
}

func TestExpiredTaskNeverRuns(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	cl, err := conn.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	stale := onceq.Task{ID: "stale", Queue: "in", Expires: time.Now().Add(-time.Minute)}
	stale.Resolve(time.Now().Add(-2 * time.Minute))
	if err := cl.ProduceSync(context.Background(), stale.Record("in")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	var runs atomic.Int64
	h := consumer.HandlerFunc(func(context.Context, *consumer.Task) error { runs.Add(1); return nil })
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("ge"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h))
	waitRecords(t, conn, "onceq-dlq-in", 1, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	dead := testutil.ReadCommitted(t, conn, 10*time.Second, "onceq-dlq-in")
	task, err := onceq.FromRecord(dead[0])
	if err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 0 || len(dead) != 1 || !strings.HasPrefix(task.LastError, "expired: ") {
		t.Fatalf("runs %d, dead letters %d, error %q", runs.Load(), len(dead), task.LastError)
	}
}

// TestAbandonedHandlerIsRetried: a handler that ignores its canceled
// context does not hold its lane; the run counts as failed and is retried.
func TestAbandonedHandlerIsRetried(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	testutil.CreateTopic(t, conn, "out", 1)
	produceTasks(t, conn, "in", []string{"stuck"})
	var runs atomic.Int64
	block := make(chan struct{})
	defer close(block)
	h := consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
		if runs.Add(1) == 1 {
			<-block // ignores ctx
		}
		return copyCounting("out").Handle(ctx, task)
	})
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("gab"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h), consumer.TaskTimeout(200*time.Millisecond), consumer.AbandonGrace(200*time.Millisecond))
	waitOutputs(t, conn, "out", 1, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 2 {
		t.Fatalf("ran %d times, want 2", runs.Load())
	}
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, 10*time.Second, "out"), []string{"stuck"})
}

// TestRetryAfterIsCapped pins a parked task: a handler (or the server
// behind it, with Retry-After) asked for a retry in three years, and the
// task waited that long, past the longest backoff. The delay is capped at
// the backoff's max.
func TestRetryAfterIsCapped(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	testutil.CreateTopic(t, conn, "out", 1)
	produceTasks(t, conn, "in", []string{"parked"})
	var runs runTimes
	h := consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
		if runs.add(task.ID) == 1 {
			return consumer.RetryAfter(3*365*24*time.Hour, errors.New("come back in three years"))
		}
		return copyCounting("out").Handle(ctx, task)
	})
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("gp"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h), consumer.Backoff(100*time.Millisecond, 2, time.Second))
	waitOutputs(t, conn, "out", 1, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	at := runs.get("parked")
	if len(at) != 2 {
		t.Fatalf("ran %d times, want 2", len(at))
	}
	if gap := at[1].Sub(at[0]); gap < time.Second || gap > 10*time.Second {
		t.Fatalf("retried %v after the first run; want the backoff max, 1s (and the delay ladder's lateness)", gap)
	}
}

// TestSnoozeCountsNoAttempt: a task that snoozes three times, with one
// attempt allowed, runs a fourth time and succeeds, never dead-lettered;
// each snooze waits its delay, and while it waits the task's record is
// scheduled, with why and the result the run set.
func TestSnoozeCountsNoAttempt(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	testutil.CreateTopic(t, conn, "out", 1)
	produceTasks(t, conn, "in", []string{"sleepy"})
	var runs runTimes
	h := consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
		if n := runs.add(task.ID); n <= 3 {
			if err := task.SetResult([]byte("progress " + strings.Repeat("+", n))); err != nil {
				return err
			}
			return fmt.Errorf("wrapped: %w", consumer.Snooze(200*time.Millisecond, "not yet"))
		}
		return copyCounting("out").Handle(ctx, task)
	})
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("gs"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h), consumer.MaxAttempts(1))
	waitOutputs(t, conn, "out", 1, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	at := runs.get("sleepy")
	if len(at) != 4 {
		t.Fatalf("ran %d times, want 4", len(at))
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < 200*time.Millisecond {
			t.Errorf("run %d came %v after a snooze of 200ms", i+1, gap)
		}
	}
	if dls := testutil.ReadCommitted(t, conn, 10*time.Second, "onceq-dlq-in"); len(dls) != 0 {
		t.Fatalf("%d dead letters of a task that only snoozed", len(dls))
	}
	var scheduled []onceq.TaskRecord
	for _, r := range testutil.ReadCommitted(t, conn, 10*time.Second, "onceq-rec-in") {
		recs, err := onceq.DecodeTaskRecords(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			if rec.State == onceq.StateScheduled {
				scheduled = append(scheduled, rec)
			}
		}
	}
	if len(scheduled) != 3 || scheduled[2].Error != "wrapped: not yet" || string(scheduled[2].Result) != "progress +++" || scheduled[2].Attempt != 3 {
		t.Fatalf("the snoozes' records: %+v", scheduled)
	}
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, 10*time.Second, "out"), []string{"sleepy"})
}

// TestReleaseKeepsTheAttempt: a task released by its handler, at once or
// for a while, runs again at the same attempt and max attempts, as its
// ID's first run (not deduplicated), with one attempt allowed; what the
// released run set (its state writes, its result) is dropped; the task
// released at once leaves no task record until it succeeds, the one
// released for a while is scheduled meanwhile, at attempt 1.
func TestReleaseKeepsTheAttempt(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	testutil.CreateTopic(t, conn, "out", 1)
	produceTasks(t, conn, "in", []string{"now", "later"})
	var runs runTimes
	var mu sync.Mutex
	seen := map[string][][2]int{} // attempt and max attempts of each run
	h := consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
		mu.Lock()
		seen[task.ID] = append(seen[task.ID], [2]int{task.Attempt, task.MaxAttempts})
		mu.Unlock()
		if runs.add(task.ID) == 1 {
			if _, err := task.State().Counter([]byte("runs/"+task.ID), 1); err != nil {
				return err
			}
			if err := task.SetResult([]byte("dropped")); err != nil {
				return err
			}
			d := time.Duration(0)
			if task.ID == "later" {
				d = 300 * time.Millisecond
			}
			return fmt.Errorf("wrapped: %w", consumer.Release(d, "not now"))
		}
		return copyCounting("out").Handle(ctx, task)
	})
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("gr"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h), consumer.MaxAttempts(1))
	waitOutputs(t, conn, "out", 2, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"now", "later"} {
		if got := fmt.Sprint(seen[id]); got != "[[1 0] [1 0]]" {
			t.Errorf("%s ran at attempt and max attempts %s; want [[1 0] [1 0]]: a release counts nothing", id, got)
		}
	}
	if at := runs.get("later"); len(at) == 2 && at[1].Sub(at[0]) < 300*time.Millisecond {
		t.Errorf("released for 300ms, it ran again %v later", at[1].Sub(at[0]))
	}
	if dls := testutil.ReadCommitted(t, conn, 10*time.Second, "onceq-dlq-in"); len(dls) != 0 {
		t.Fatalf("%d dead letters of tasks that were only released", len(dls))
	}
	states := map[string][]string{}
	for _, r := range testutil.ReadCommitted(t, conn, 10*time.Second, "onceq-rec-in") {
		recs, err := onceq.DecodeTaskRecords(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			states[rec.ID] = append(states[rec.ID], fmt.Sprintf("%s@%d%s", rec.State, rec.Attempt, rec.Result))
		}
	}
	if got := fmt.Sprint(states["now"]); got != "[succeeded@1]" {
		t.Errorf("records of the task released at once: %s; want [succeeded@1]", got)
	}
	if got := fmt.Sprint(states["later"]); got != "[scheduled@1 succeeded@1]" {
		t.Errorf("records of the task released for a while: %s; want [scheduled@1 succeeded@1]", got)
	}
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, 10*time.Second, "out"), []string{"now", "later"})
}
