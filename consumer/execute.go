package consumer

import (
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/dlq"
	"github.com/onceq/onceq/internal/flow"
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

// attempt decodes, deduplicates, checks expiry and the due time, and
// handles a record once.
func (w *Worker) attempt(sl *slot, it *item) (*result, error) {
	r := it.rec
	task, err := onceq.FromRecord(r)
	var cont flow.Cont
	if err == nil && len(task.Workflow) > 0 {
		cont, err = flow.Decode(task.Workflow) // so that its end can continue it
	}
	if err != nil {
		w.cfg.log.Warn("malformed task: dead-lettered", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
		return w.deadLetterRaw(r, onceq.RecordID(r.Topic, r.Partition, r.Offset), err)
	}
	key := task.DedupKey()
	if w.cfg.guarantee == ExactlyOnce {
		if res, err := w.forwardHome(r, &task); res != nil || err != nil {
			return res, err
		}
		dup, err := it.ps.duplicate(it, key, task.IdempotencyKey())
		if err != nil {
			return nil, err
		}
		if dup {
			return &result{id: key, noMark: true, outcome: outcomeDuplicate}, nil
		}
	}
	if w.control.Canceled(r.Topic, task.ID) {
		return w.cancel(&task, key, r.Topic, "")
	}
	// A step of a canceled workflow ends canceled instead of starting,
	// whenever it comes: the workflow's cancel stays in the control topic.
	// The workflow service's own records (join reports) go on, so that
	// what they continue is canceled in its turn.
	if cont.W != "" && r.Topic != onceq.WorkflowQueue && w.control.Canceled(onceq.WorkflowQueue, cont.W) {
		return w.cancel(&task, key, r.Topic, "workflow "+cont.W+" canceled")
	}
	if task.Cancel != "" {
		return w.cancel(&task, key, r.Topic, task.Cancel)
	}
	if err := w.waitUnpaused(it, r.Topic); err != nil {
		return nil, err
	}
	now := time.Now()
	if !task.Expires.IsZero() && now.After(task.Expires) {
		text := "expired at " + task.Expires.UTC().Format(time.RFC3339Nano)
		if w.cfg.dropExpired {
			res := &result{id: key, at: now, outcome: outcomeExpired, queue: task.Queue,
				rec: taskOutcome{state: onceq.StateExpired, task: factsOf(&task), reason: dlq.ReasonExpired, err: text}}
			return res, w.failFlow(res, &task, now)
		}
		res, err := w.deadLetter(&task, key, dlq.ReasonExpired, text, now)
		if res != nil {
			res.outcome = outcomeExpired
		}
		return res, err
	}
	if task.DelayedAt(now) {
		// Written straight to the queue with a due time ahead (any
		// client can): never early, so it waits, here if briefly, or
		// through the delay buckets.
		if wait := task.Due.Sub(now); wait <= maxWaitInPlace {
			if !sleep(wait, w.sched.quit) {
				return nil, errCanceledRun
			}
			now = time.Now()
		} else {
			return w.hold(&task, key, now)
		}
	}
	it.ps.latency.Observe(sinceDue(&task, now).Seconds())
	t := &Task{Task: task, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, w: w, state: State{ps: it.ps}, started: now}
	stopped, herr := w.runHandler(sl, it, t, key, now)
	if herr != nil {
		if errors.Is(herr, errTakenOver) || errors.Is(herr, errCanceledRun) {
			return nil, herr
		}
		if it.stale() {
			// Its partition was revoked and its context canceled: the
			// result would be dropped; the next owner runs the task.
			return nil, errCanceledRun
		}
		if stopped {
			// Canceled while it ran, and it gave up: it ends canceled.
			return w.stopRun(&task, key, r.Topic, herr, now)
		}
		if d, ok := snoozed(herr); ok && task.Attempt < onceq.MaxAttemptCount {
			return w.snooze(&task, key, herr.Error(), d, now, t.result)
		}
		res, err := w.failure(&task, key, herr, now)
		w.withdrawLateCancel(res, r.Topic, task.ID)
		return res, err
	}
	res, err := w.success(t, key)
	w.withdrawLateCancel(res, r.Topic, task.ID)
	return res, err
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

// runHandler calls the handler on the slot's goroutine with the task's
// time-to-run, turning a panic into an error. The watchdog cancels the
// context at the deadline and abandons the run after the grace period;
// shutdown cancels it at the shutdown timeout.
//
// stopped reports whether a cancel in the control topic canceled the
// context while the handler ran.
func (w *Worker) runHandler(sl *slot, it *item, t *Task, key string, now time.Time) (stopped bool, err error) {
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = w.cfg.taskTimeout
	}
	r := &handlerRun{it: it, task: &t.Task, key: key, started: now, abandonAt: now.Add(timeout + w.cfg.abandonGrace)}
	r.ctx.deadline, r.ctx.timeout = now.Add(timeout), timeout
	inflight := it.ps.inflight
	inflight.Inc()
	w.sched.occupy(sl, r)
	defer func() {
		if p := recover(); p != nil {
			w.cfg.log.Error("handler panicked", "id", t.ID, "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panicked: %v", p)
		}
		w.sched.vacate(sl, r)
		inflight.Dec()
		if !r.state.CompareAndSwap(runRunning, runDone) {
			switch r.state.Load() {
			case runCanceled:
				err = errCanceledRun
			default:
				err = errTakenOver
			}
			return
		}
		// One clock read serves the metric, the deadline and the result.
		t.ended = time.Now()
		w.metrics.handler.Observe(t.ended.Sub(now).Seconds())
		if err == nil && t.ended.After(r.ctx.deadline) {
			err = fmt.Errorf("task %q exceeded its time-to-run of %v", t.ID, timeout)
		}
		stopped = r.stopped.Load()
	}()
	return false, w.cfg.handler.Handle(&r.ctx, t)
}
