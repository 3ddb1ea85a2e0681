package consumer

import (
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/dlq"
	"github.com/onceq/onceq/internal/flow"
	"github.com/onceq/onceq/internal/tracing"
)

// errTakenOver ends a slot goroutine whose handler the watchdog abandoned.
var errTakenOver = errors.New("slot taken over")

// errCanceledRun is the end of a run canceled at shutdown: its result is
// dropped.
var errCanceledRun = errors.New("canceled at shutdown")

// errAbandoned is the failure of a handler that ran past its time-to-run
// and its grace.
var errAbandoned = errors.New("abandoned: the handler ignored its canceled context past its time-to-run and grace")

// execute runs one record to its result. Handler failures are results too
// (a retry record or a dead letter); only infrastructure errors (the
// checkpoint, the brokers) make it try again in place after a pause. A nil
// result means the work is dropped: the partition was revoked, or the
// worker stops. takenOver means the watchdog abandoned the handler and
// another goroutine now runs the slot: this one must exit.
func (w *Worker) execute(sl *slot, it *item, quit <-chan struct{}) (res *result, takenOver bool) {
	res = w.retryInPlace(it, quit, func() (*result, error) {
		res, err := w.attempt(sl, it)
		switch {
		case errors.Is(err, errTakenOver):
			takenOver = true
			return nil, nil
		case errors.Is(err, errCanceledRun):
			return nil, nil
		}
		return res, err
	})
	if res != nil {
		res.src = it.rec
	}
	return res, takenOver
}

// retryInPlace calls fn until it succeeds, pausing after infrastructure
// errors. nil means the work is dropped: the partition was revoked, or the
// worker stops.
func (w *Worker) retryInPlace(it *item, quit <-chan struct{}, fn func() (*result, error)) *result {
	for run := 1; ; run++ {
		if it.stale() {
			return nil
		}
		res, err := fn()
		if err == nil {
			return res
		}
		if w.storeFailed() != nil {
			// The worker stops on a failed checkpoint and says why once;
			// a warning per task in flight says nothing more.
			return nil
		}
		w.cfg.log.Warn("running a task failed for a reason outside its handler; trying again after a pause", "topic", it.rec.Topic,
			"partition", it.rec.Partition, "offset", it.rec.Offset, "run", run, "err", err, "pause", w.cfg.retryPause)
		select {
		case <-time.After(w.cfg.retryPause):
		case <-quit:
			return nil
		}
		if w.stopping.Load() {
			return nil
		}
	}
}

// attempt runs a record once, one concern after another: it decodes the
// task, settles without running it a record that must not run here (a
// duplicate, one outside its key's partition, a canceled, expired or later
// task), waits while its queue is paused, and runs the rest.
func (w *Worker) attempt(sl *slot, it *item) (*result, error) {
	r := it.rec
	task, cont, err := decode(r)
	if err == nil && onceq.QueueTopic(task.Queue) != r.Topic {
		err = fmt.Errorf("onceq-queue %q: the task of another queue than its topic's, and not a lane queue of it", task.Queue)
	}
	if err != nil {
		return w.malformed(r, err)
	}
	key := task.DedupKey()
	if w.queues.lanes[r.Topic] && !w.queues.has(task.Queue) {
		return &result{id: key, noMark: true, outcome: outcomeOtherQueue}, nil
	}
	if res, err := w.deduplicate(it, &task, key); res != nil || err != nil {
		return res, err
	}
	if why, ok := w.canceledBefore(&task, cont, task.Queue); ok {
		return w.cancel(&task, key, task.Queue, why)
	}
	if err := w.waitUnpaused(it, task.Queue); err != nil {
		return nil, err
	}
	now := time.Now()
	if res, err := w.expire(&task, key, now); res != nil || err != nil {
		return res, err
	}
	now, res, err := w.awaitDue(&task, key, now)
	if res != nil || err != nil {
		return res, err
	}
	release, err := w.waitLimit(it, task.Queue, &task)
	if err != nil {
		return nil, err
	}
	if release != nil {
		defer release()
		now = time.Now()
	}
	it.ps.latency.Observe(sinceDue(&task, now).Seconds())
	t := &Task{Task: task, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, w: w, it: it, state: State{ps: it.ps}, started: now}
	res, _, err = w.run(sl, it, t, key)
	return res, err
}

// decode reads a record's task from its headers and, for a workflow's
// step, its continuation, so that the step's end can continue it.
func decode(r *kgo.Record) (onceq.Task, flow.Cont, error) {
	task, err := onceq.FromRecord(r)
	if err != nil || len(task.Workflow) == 0 {
		return task, flow.Cont{}, err
	}
	cont, err := flow.Decode(task.Workflow)
	return task, cont, err
}

// malformed dead-letters a record whose headers do not decode: it never
// runs.
func (w *Worker) malformed(r *kgo.Record, err error) (*result, error) {
	w.cfg.log.Warn("malformed task: dead-lettered", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
	return w.deadLetterRaw(r, onceq.RecordID(r.Topic, r.Partition, r.Offset), err)
}

// deduplicate settles, under ExactlyOnce, a record that must not run here:
// one outside its key's partition goes home (forwardHome), and a duplicate
// of a processed ID is acknowledged without running; under AtLeastOnce,
// only the fetch's turn of a record run ahead of it (lookahead.go) is.
// nil, nil: it runs.
func (w *Worker) deduplicate(it *item, task *onceq.Task, key string) (*result, error) {
	if w.cfg.guarantee != ExactlyOnce {
		if it.ps.ranAhead(it) {
			return &result{id: key, noMark: true, outcome: outcomeDuplicate}, nil
		}
		return nil, nil
	}
	if res, err := w.forwardHome(it.rec, task); res != nil || err != nil {
		return res, err
	}
	dup, err := it.ps.duplicate(it, key, task.IdempotencyKey())
	if err != nil || !dup {
		return nil, err
	}
	return &result{id: key, noMark: true, outcome: outcomeDuplicate}, nil
}

// canceledBefore reports whether a task ends canceled instead of starting,
// and why (empty for a cancel of the control topic, which its outcome
// withdraws): canceled in the control topic, a step of a canceled
// workflow, or a task that carries its own cancel (onceq-cancel).
//
// A workflow's cancel stays in the control topic, so its steps end
// canceled whenever they come; the workflow service's own records (join
// reports) go on, so that what they continue is canceled in its turn.
func (w *Worker) canceledBefore(task *onceq.Task, cont flow.Cont, queue string) (why string, canceled bool) {
	switch {
	case w.control.Canceled(queue, task.ID):
		return "", true
	case cont.W != "" && queue != onceq.WorkflowQueue && w.control.Canceled(onceq.WorkflowQueue, cont.W):
		return "workflow " + cont.W + " canceled", true
	case task.Cancel != "":
		return task.Cancel, true
	}
	return "", false
}

// expiry reports whether a task is past its expiry time at now, and the
// text its dead letter or record carries.
func expiry(task *onceq.Task, now time.Time) (text string, expired bool) {
	if task.Expires.IsZero() || !now.After(task.Expires) {
		return "", false
	}
	return "expired at " + task.Expires.UTC().Format(time.RFC3339Nano), true
}

// expire ends a task past its expiry time without running it: a dead
// letter with reason expired or, with DropExpired, only its expired
// record. nil, nil: it has not expired.
func (w *Worker) expire(task *onceq.Task, key string, now time.Time) (*result, error) {
	text, expired := expiry(task, now)
	if !expired {
		return nil, nil
	}
	if w.cfg.dropExpired {
		res := &result{id: key, at: now, outcome: outcomeExpired, queue: task.Queue,
			rec: taskOutcome{state: onceq.StateExpired, task: factsOf(task), reason: dlq.ReasonExpired, err: text}}
		return res, w.failFlow(res, task, now)
	}
	res, err := w.deadLetter(task, key, dlq.ReasonExpired, text, now)
	if res != nil {
		res.outcome = outcomeExpired
	}
	return res, err
}

// awaitDue holds a task written straight to its queue ahead of its due
// time (any client can): never early, so it waits in its slot when the
// wait is short, or goes through the delay buckets (hold). It returns the
// time the task starts, or the result that holds it.
func (w *Worker) awaitDue(task *onceq.Task, key string, now time.Time) (time.Time, *result, error) {
	if !task.DelayedAt(now) {
		return now, nil, nil
	}
	wait := task.Due.Sub(now)
	if wait > maxWaitInPlace {
		res, err := w.hold(task, key, now)
		return now, res, err
	}
	if !sleep(wait, w.sched.quit) {
		return now, nil, errCanceledRun
	}
	return time.Now(), nil, nil
}

// run is the part of an attempt that runs the handler: the run under its
// time-to-run with panics recovered (runHandler), how it ended turned into
// the result (settle), and the withdrawal of a cancel the run outlived.
// The test kit (package consumertest) runs a task through it. herr is the
// run's error as settle saw it: the handler's, its panic, or its
// time-to-run passing.
func (w *Worker) run(sl *slot, it *item, t *Task, key string) (res *result, herr, err error) {
	stopped, herr := w.runHandler(sl, it, t, key)
	res, err = w.settle(it, t, key, stopped, herr)
	if t.trace != nil && res != nil {
		res.commit = startCommitSpan(t)
	}
	w.withdrawLateCancel(res, it.rec.Topic, t.ID)
	return res, herr, err
}

// ending is how a handler's run ends its attempt.
type ending int

const (
	endSucceeded ending = iota
	endTakenOver        // the watchdog abandoned it: takeOver records the failure
	endShutdown         // canceled at shutdown: dropped, it runs again
	endRevoked          // its partition was revoked: dropped, the next owner runs it
	endStopped          // a cancel from the control topic stopped it: it ends canceled
	endSnoozed          // it asked for Snooze: it runs again, no attempt counted
	endReleased         // it asked for Release: back in its queue as it came
	endFailed           // a retry or a dead letter (failure)
)

// endingOf maps a handler's run to its ending: herr is what the run
// returned, revoked whether its partition was revoked meanwhile, stopped
// whether a cancel stopped it, and attempt its task's attempt. A run that
// succeeds ends succeeded whatever happened meanwhile; a snooze at the
// largest attempt count the wire format holds is a failure.
func endingOf(herr error, revoked, stopped bool, attempt int) ending {
	switch {
	case herr == nil:
		return endSucceeded
	case errors.Is(herr, errTakenOver):
		return endTakenOver
	case errors.Is(herr, errCanceledRun):
		return endShutdown
	case revoked:
		return endRevoked
	case stopped:
		return endStopped
	}
	if _, ok := released(herr); ok {
		return endReleased
	}
	if _, ok := snoozed(herr); ok && attempt < onceq.MaxAttemptCount {
		return endSnoozed
	}
	return endFailed
}

// settle turns a handler's run into its attempt's result: its effects
// (success), a canceled end (stopRun), a snooze, a release, or a retry or
// dead letter (failure). A dropped run returns no result and the error that drops it
// (errTakenOver, errCanceledRun).
func (w *Worker) settle(it *item, t *Task, key string, stopped bool, herr error) (*result, error) {
	switch endingOf(herr, it.stale(), stopped, t.Attempt) {
	case endTakenOver:
		return nil, errTakenOver
	case endShutdown, endRevoked:
		// A revoked partition's results would be dropped, and its
		// context was canceled: the next owner runs the task.
		return nil, errCanceledRun
	case endStopped:
		return w.stopRun(&t.Task, key, it.rec.Topic, herr, t.started)
	case endSnoozed:
		d, _ := snoozed(herr)
		return w.snooze(&t.Task, key, herr.Error(), d, t.started, t.result)
	case endReleased:
		d, _ := released(herr)
		return w.giveBack(&t.Task, key, herr.Error(), d)
	case endFailed:
		return w.failure(&t.Task, key, herr, t.started)
	}
	return w.success(t, key)
}

// maxWaitInPlace is the longest a task due ahead waits in its slot; one
// due later goes through the delay buckets.
const maxWaitInPlace = 250 * time.Millisecond

// sleep waits d, or until quit is closed; it reports whether d passed.
func sleep(d time.Duration, quit <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-quit:
		return false
	}
}

// timeToRun is how long a task's handler may run: its own onceq-timeout,
// or the worker's TaskTimeout.
func timeToRun(task *onceq.Task, taskTimeout time.Duration) time.Duration {
	if task.Timeout > 0 {
		return task.Timeout
	}
	return taskTimeout
}

// runHandler calls the handler on the slot's goroutine under the task's
// time-to-run (startRun, endRun), turning a panic into an error
// (panicked). The watchdog cancels the context at the deadline and
// abandons the run after the grace period; shutdown cancels it at the
// shutdown timeout.
//
// stopped reports whether a cancel in the control topic canceled the
// context while the handler ran.
func (w *Worker) runHandler(sl *slot, it *item, t *Task, key string) (stopped bool, err error) {
	r := w.startRun(sl, it, t, key)
	if tracing.Has(t.Headers) {
		startSpans(r, t)
	}
	defer func() {
		if p := recover(); p != nil {
			err = w.panicked(t, p)
		}
		stopped, err = w.endRun(sl, r, t, err)
		if t.span != nil {
			endSpan(t.span, err)
		}
	}()
	return false, w.cfg.handler.Handle(&r.ctx, t)
}

// startRun puts the task's run in its slot, where the watchdog holds it
// to its time-to-run and the control topic's cancels, and counts it in
// flight.
func (w *Worker) startRun(sl *slot, it *item, t *Task, key string) *handlerRun {
	timeout := timeToRun(&t.Task, w.cfg.taskTimeout)
	r := &handlerRun{it: it, task: &t.Task, key: key, started: t.started, abandonAt: t.started.Add(timeout + w.cfg.abandonGrace)}
	r.ctx.deadline, r.ctx.timeout = t.started.Add(timeout), timeout
	r.from.Store(t.started.UnixNano())
	t.run = r
	it.ps.inflight.Inc()
	w.sched.occupy(sl, r)
	return r
}

// endRun takes the run out of its slot once its handler returned err. A
// run the watchdog abandoned, or shutdown canceled, ends with
// errTakenOver or errCanceledRun: its result is not this goroutine's to
// give. A run that returned nil past its time-to-run failed all the same.
func (w *Worker) endRun(sl *slot, r *handlerRun, t *Task, err error) (stopped bool, _ error) {
	w.sched.vacate(sl, r)
	r.it.ps.inflight.Dec()
	if !r.state.CompareAndSwap(runRunning, runDone) {
		if r.state.Load() == runCanceled {
			return false, errCanceledRun
		}
		return false, errTakenOver
	}
	// One clock read serves the metric, the deadline and the result.
	t.ended = time.Now()
	w.metrics.handler.Observe(t.ended.Sub(t.started).Seconds())
	if err == nil && t.ended.After(r.ctx.deadline) {
		err = fmt.Errorf("task %q exceeded its time-to-run of %v", t.ID, r.ctx.timeout)
	}
	return r.stopped.Load(), err
}

// panicked is the failure of a handler that panicked with p: logged with
// its stack, and retried or dead-lettered like any failure.
func (w *Worker) panicked(t *Task, p any) error {
	w.cfg.log.Error("handler panicked", "id", t.ID, "panic", p, "stack", string(debug.Stack()))
	return fmt.Errorf("handler panicked: %v", p)
}
