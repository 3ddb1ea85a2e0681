package consumertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/consumer/consumertest"
	"github.com/onceq/onceq/dlq"
	"github.com/onceq/onceq/internal/flow"
)

// within fails the test unless due is in [from, to], the window a retry
// scheduled between two clock reads falls in.
func within(t *testing.T, what string, due, from, to time.Time) {
	t.Helper()
	if due.Before(from) || due.After(to) {
		t.Errorf("%s due %v, want from %v to %v", what, due.Format(time.StampMilli), from.Format(time.StampMilli), to.Format(time.StampMilli))
	}
}

// TestRunPanicIsAFailure: a handler that panics fails as in a worker:
// the panic is its error and the task is retried, and what it emitted
// and wrote before is not committed.
func TestRunPanicIsAFailure(t *testing.T) {
	res := consumertest.Run(context.Background(), consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		t.State().Set([]byte("k"), []byte("v"))
		if err := t.Emit(onceq.Task{Queue: "out"}); err != nil {
			return err
		}
		panic("boom")
	}), onceq.Task{ID: "p", Queue: "q"})
	if res.Outcome != onceq.StateRetrying || res.Err == nil || res.Err.Error() != "handler panicked: boom" {
		t.Fatalf("outcome %q, err %v: want a retry of the panic", res.Outcome, res.Err)
	}
	if res.Retry == nil || res.Retry.Attempt != 2 || res.Retry.LastError != "handler panicked: boom" || res.Retry.Queue != "q" {
		t.Fatalf("retry %+v", res.Retry)
	}
	if len(res.Emitted) != 0 || len(res.Writes) != 0 || len(res.State) != 0 {
		t.Fatalf("a failed run commits nothing: emitted %v, writes %v, state %q", res.Emitted, res.Writes, res.State)
	}
}

// TestRunTimeToRun: the task's time-to-run cancels its handler's context
// with context.DeadlineExceeded, and a run past it fails whatever it
// returns; a handler that ignores its context past the grace is
// abandoned. Each is retried as in a worker.
func TestRunTimeToRun(t *testing.T) {
	const ttr = 50 * time.Millisecond
	// waitDone waits for ctx to end, up to a bound that only a context
	// without the time-to-run reaches.
	waitDone := func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Second):
			return errors.New("the context did not end at the time-to-run")
		}
	}

	t.Run("context ends", func(t *testing.T) {
		var deadline time.Time
		var cause error
		start := time.Now()
		res := consumertest.Run(context.Background(), consumer.HandlerFunc(func(ctx context.Context, _ *consumer.Task) error {
			deadline, _ = ctx.Deadline()
			if err := waitDone(ctx); err != nil {
				return err
			}
			cause = ctx.Err()
			return ctx.Err()
		}), onceq.Task{ID: "a", Queue: "q", Timeout: ttr})
		if cause != context.DeadlineExceeded || deadline.Before(start.Add(ttr)) || deadline.After(time.Now().Add(ttr)) {
			t.Fatalf("context ended with %v, deadline %v after the start", cause, deadline.Sub(start))
		}
		if res.Outcome != onceq.StateRetrying || !errors.Is(res.Err, context.DeadlineExceeded) || res.Retry == nil || res.Retry.Attempt != 2 {
			t.Fatalf("outcome %q, err %v, retry %+v", res.Outcome, res.Err, res.Retry)
		}
	})

	t.Run("success past the time-to-run", func(t *testing.T) {
		res := consumertest.Run(context.Background(), consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
			if err := waitDone(ctx); err != nil {
				return err
			}
			return t.SetResult([]byte("late"))
		}), onceq.Task{ID: "b", Queue: "q"}, consumertest.WorkerOptions(consumer.TaskTimeout(ttr)))
		if res.Outcome != onceq.StateRetrying || res.Err == nil || !strings.Contains(res.Err.Error(), "exceeded its time-to-run of 50ms") || res.Value != nil {
			t.Fatalf("outcome %q, err %v, value %q: want the worker's failure", res.Outcome, res.Err, res.Value)
		}
	})

	t.Run("abandoned", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		res := consumertest.Run(context.Background(), consumer.HandlerFunc(func(ctx context.Context, _ *consumer.Task) error {
			select { // ignores its context
			case <-release:
			case <-time.After(10 * time.Second):
			}
			return nil
		}), onceq.Task{ID: "c", Queue: "q", Timeout: ttr}, consumertest.WorkerOptions(consumer.AbandonGrace(0)))
		if res.Outcome != onceq.StateRetrying || res.Err == nil || !strings.Contains(res.Err.Error(), "abandoned") ||
			res.Retry == nil || !strings.Contains(res.Retry.LastError, "abandoned") {
			t.Fatalf("outcome %q, err %v, retry %+v: want the abandoned run retried", res.Outcome, res.Err, res.Retry)
		}
	})
}

// TestRunRetryBackoff: a failure is retried after the worker's backoff,
// spread by its jitter; a RetryAfter and a Snooze after what they ask,
// capped at the backoff's max.
func TestRunRetryBackoff(t *testing.T) {
	fail := func(err error) consumer.Handler {
		return consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
			t.State().Set([]byte("k"), []byte("v"))
			if err := t.SetResult([]byte("partial")); err != nil {
				return err
			}
			if e := t.Emit(onceq.Task{Queue: "out"}); e != nil {
				return e
			}
			return err
		})
	}

	// The worker's defaults: 1s, doubling, up to 20% more.
	before := time.Now()
	res := consumertest.Run(context.Background(), fail(errors.New("busy")), onceq.Task{ID: "a", Queue: "q"},
		consumertest.State([]byte("k"), []byte("old")))
	after := time.Now()
	if res.Outcome != onceq.StateRetrying || res.Retry == nil || res.Retry.Attempt != 2 || res.Retry.LastError != "busy" || res.Retry.ID != "a" {
		t.Fatalf("outcome %q, retry %+v", res.Outcome, res.Retry)
	}
	within(t, "default backoff", res.Retry.Due, before.Add(consumer.DefaultBackoffBase), after.Add(consumer.DefaultBackoffBase*6/5+time.Millisecond))
	if len(res.Emitted) != 0 || len(res.Writes) != 0 || string(res.State["k"]) != "old" || res.Value != nil || res.DeadLetter != nil {
		t.Fatalf("a retried run commits no effects: %+v", res)
	}

	// The worker's Backoff at the task's third attempt, no jitter.
	opts := consumertest.WorkerOptions(consumer.Backoff(2*time.Second, 3, time.Minute), consumer.Jitter(0))
	before = time.Now()
	res = consumertest.Run(context.Background(), fail(errors.New("busy")), onceq.Task{ID: "b", Queue: "q", Attempt: 3}, opts)
	after = time.Now()
	if res.Retry == nil || res.Retry.Attempt != 4 {
		t.Fatalf("retry %+v", res.Retry)
	}
	within(t, "backoff of attempt 3", res.Retry.Due, before.Add(18*time.Second), after.Add(18*time.Second+time.Millisecond))

	// RetryAfter, capped at the backoff's max.
	before = time.Now()
	res = consumertest.Run(context.Background(), fail(consumer.RetryAfter(time.Hour, errors.New("later"))), onceq.Task{ID: "c", Queue: "q"}, opts)
	after = time.Now()
	if d, ok := res.RetryAfter(); !ok || d != time.Hour || res.Retry == nil {
		t.Fatalf("RetryAfter %v %v, retry %+v", d, ok, res.Retry)
	}
	within(t, "RetryAfter", res.Retry.Due, before.Add(time.Minute), after.Add(time.Minute+time.Millisecond))

	// Snooze: no attempt counted, and the result kept while it waits.
	before = time.Now()
	res = consumertest.Run(context.Background(), fail(consumer.Snooze(5*time.Second, "waiting")), onceq.Task{ID: "d", Queue: "q", MaxAttempts: 3})
	after = time.Now()
	if res.Outcome != onceq.StateScheduled || res.Retry == nil || res.Retry.Attempt != 2 || res.Retry.MaxAttempts != 4 ||
		res.Retry.LastError != "waiting" || string(res.Value) != "partial" || len(res.Writes) != 0 {
		t.Fatalf("snooze: outcome %q, retry %+v, value %q", res.Outcome, res.Retry, res.Value)
	}
	within(t, "Snooze", res.Retry.Due, before.Add(5*time.Second), after.Add(5*time.Second+time.Millisecond))
}

// TestRunDeadLetters: the last attempt's failure, and a SkipRetry, send
// the task to its dead letters, with the reason, and commit nothing else.
func TestRunDeadLetters(t *testing.T) {
	h := consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		t.State().Set([]byte("k"), []byte("v"))
		if err := t.Emit(onceq.Task{Queue: "out"}); err != nil {
			return err
		}
		return errors.New("boom")
	})
	for _, tc := range []struct {
		name   string
		task   onceq.Task
		h      consumer.Handler
		opts   []consumertest.Opt
		reason string
		text   string
	}{
		{name: "the worker's max attempts", task: onceq.Task{ID: "a", Queue: "q", Attempt: consumer.DefaultMaxAttempts}, h: h,
			reason: dlq.ReasonMaxAttempts, text: "attempt 5 of 5: boom"},
		{name: "the task's max attempts", task: onceq.Task{ID: "b", Queue: "q", Attempt: 2, MaxAttempts: 2}, h: h,
			reason: dlq.ReasonMaxAttempts, text: "attempt 2 of 2: boom"},
		{name: "MaxAttempts(1)", task: onceq.Task{ID: "c", Queue: "q"}, h: h, opts: []consumertest.Opt{consumertest.WorkerOptions(consumer.MaxAttempts(1))},
			reason: dlq.ReasonMaxAttempts, text: "attempt 1 of 1: boom"},
		{name: "SkipRetry", task: onceq.Task{ID: "d", Queue: "q"}, reason: dlq.ReasonFailed, text: "bad input",
			h: consumer.HandlerFunc(func(context.Context, *consumer.Task) error { return consumer.SkipRetry(errors.New("bad input")) })},
	} {
		res := consumertest.Run(context.Background(), tc.h, tc.task, tc.opts...)
		if res.Outcome != onceq.StateDead || res.DeadLetter == nil || res.DeadLetter.Reason != tc.reason || res.DeadLetter.Error != tc.text ||
			res.DeadLetter.Task.ID != tc.task.ID || res.DeadLetter.Task.Queue != "q" {
			t.Errorf("%s: outcome %q, dead letter %+v; want %s %q", tc.name, res.Outcome, res.DeadLetter, tc.reason, tc.text)
			continue
		}
		if res.Retry != nil || len(res.Emitted) != 0 || len(res.Writes) != 0 || len(res.State) != 0 {
			t.Errorf("%s: a dead task commits only its dead letter: %+v", tc.name, res)
		}
	}
}

// TestRunWorkflowContinuation: a workflow step's end emits what a worker
// emits in its transaction: on success the chain's next step, with the
// step's result as its input; on a dead end the error callback, with the
// failure.
func TestRunWorkflowContinuation(t *testing.T) {
	step := func(queue, id string) flow.Node { return flow.Node{Task: &flow.Step{Queue: queue, ID: id}} }
	chain := flow.Node{Chain: []flow.Node{step("a", "wf/0"), step("b", "wf/1")}, OnError: []flow.Node{step("oops", "wf/err")}}
	first, err := flow.Start("wf", &chain, nil, nil)
	if err != nil || len(first) != 1 {
		t.Fatalf("start: %v, %d tasks", err, len(first))
	}

	res := consumertest.Run(context.Background(), consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		if err := t.Emit(onceq.Task{ID: "side", Queue: "side"}); err != nil {
			return err
		}
		return t.SetResult([]byte("out-a"))
	}), first[0])
	if res.Outcome != onceq.StateSucceeded || string(res.Value) != "out-a" {
		t.Fatalf("outcome %q, err %v, value %q", res.Outcome, res.Err, res.Value)
	}
	if len(res.Emitted) != 2 || res.Emitted[0].ID != "side" {
		t.Fatalf("emitted %+v: want the handler's task, then the chain's next step", res.Emitted)
	}
	next := res.Emitted[1]
	if next.ID != "wf/1" || next.Queue != "b" || string(next.Input) != "out-a" || len(next.Workflow) == 0 {
		t.Fatalf("next step %+v", next)
	}

	res = consumertest.Run(context.Background(), consumer.HandlerFunc(func(context.Context, *consumer.Task) error {
		return consumer.SkipRetry(errors.New("bad"))
	}), first[0])
	if res.Outcome != onceq.StateDead || len(res.Emitted) != 1 || res.Emitted[0].ID != "wf/err" || res.Emitted[0].Queue != "oops" {
		t.Fatalf("outcome %q, emitted %+v: want the error callback", res.Outcome, res.Emitted)
	}
	var f flow.Failure
	if err := json.Unmarshal(res.Emitted[0].Input, &f); err != nil || f.ID != "wf/0" || f.Workflow != "wf" || f.Reason != dlq.ReasonFailed || f.Error != "bad" {
		t.Fatalf("callback input %s (%v)", res.Emitted[0].Input, err)
	}
}

// TestRunOnce: a Task runs once, as its record does; ctx done first is
// the worker's shutdown, which drops the run.
func TestRunOnce(t *testing.T) {
	k := consumertest.NewTask(onceq.Task{ID: "a", Queue: "q"})
	ok := consumer.HandlerFunc(func(context.Context, *consumer.Task) error { return nil })
	if res := k.Run(context.Background(), ok); res.Outcome != onceq.StateSucceeded {
		t.Fatalf("first run: %q %v", res.Outcome, res.Err)
	}
	if res := k.Run(context.Background(), ok); res.Outcome != "" || res.Err == nil {
		t.Fatalf("second run: %q %v", res.Outcome, res.Err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	res := consumertest.Run(ctx, consumer.HandlerFunc(func(hctx context.Context, _ *consumer.Task) error {
		cancel()
		<-hctx.Done()
		return hctx.Err()
	}), onceq.Task{ID: "b", Queue: "q"})
	if res.Outcome != "" || !errors.Is(res.Err, context.Canceled) {
		t.Fatalf("canceled run: %q %v", res.Outcome, res.Err)
	}
}
