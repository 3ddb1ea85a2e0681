package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/ctltopic"
	"github.com/onceq/onceq/internal/limit"
)

// cancel ends a canceled task without running it: marked processed like a
// success without effects, with a canceled task record. A cancel from the
// control topic (why empty) is tombstoned in the same transaction, since
// it took effect; a task that carries its own (onceq.Task.Cancel) has its
// text as the record's error. A workflow's step continues as failed.
func (w *Worker) cancel(task *onceq.Task, key, queue, why string) (*result, error) {
	w.cfg.log.Info("task canceled: not run", "id", task.ID, "queue", queue, "attempt", task.Attempt, "why", why)
	return w.canceled(task, key, queue, why, time.Time{})
}

// stopRun ends canceled a task whose handler gave up when a cancel from
// the control topic canceled its context: herr is what it returned.
func (w *Worker) stopRun(task *onceq.Task, key, queue string, herr error, started time.Time) (*result, error) {
	w.cfg.log.Info("task canceled while it ran", "id", task.ID, "queue", queue, "attempt", task.Attempt, "err", herr)
	return w.canceled(task, key, queue, "canceled while running: "+herr.Error(), started)
}

func (w *Worker) canceled(task *onceq.Task, key, queue, why string, started time.Time) (*result, error) {
	now := time.Now()
	res := &result{id: key, at: now, outcome: outcomeCanceled, queue: queue,
		rec: taskOutcome{state: onceq.StateCanceled, task: factsOf(task), started: started, reason: "canceled", err: why}}
	if why == "" || !started.IsZero() {
		res.outputs = []*kgo.Record{withdrawCancel(queue, task.ID)}
	}
	if err := w.failFlow(res, task, now); err != nil {
		return nil, err
	}
	return res, nil
}

// withdrawCancel is the tombstone of a cancel of task id of queue.
func withdrawCancel(queue, id string) *kgo.Record {
	return ctltopic.Entry{Queue: queue, ID: id, Deleted: true}.Record()
}

// withdrawLateCancel adds to a task's final result the tombstone of a
// cancel that came while it ran and that it finished before seeing: the
// cancel names a run that is over, and must not wait for another
// submission of the ID. A workflow's cancel stays (see stopIfCanceled).
func (w *Worker) withdrawLateCancel(res *result, queue, id string) {
	if res == nil || res.outcome == outcomeCanceled || !res.rec.state.Final() || queue == onceq.WorkflowQueue || !w.control.Canceled(queue, id) {
		return
	}
	res.outputs = append(res.outputs, withdrawCancel(queue, id))
}

// setPaused applies a change of a queue's pause state from the control
// topic: the worker stops or resumes fetching it (tasks already fetched
// wait in waitUnpaused).
func (w *Worker) setPaused(queue string, paused bool) {
	if !w.queues.has(queue) {
		return
	}
	w.pauseMu.Lock()
	defer w.pauseMu.Unlock()
	// A lane queue shares its lane's partitions with others: its fetched
	// tasks wait (waitUnpaused) while the lane goes on.
	if _, _, lane := onceq.SplitLane(queue); !lane && w.kafka != nil {
		w.kafka.pauseQueue(queue, paused)
	}
	v := 0.0
	if paused {
		v = 1
		w.cfg.log.Info("queue paused: no task of it starts until it is resumed", "queue", queue)
	} else {
		w.cfg.log.Info("queue resumed", "queue", queue)
		if held := w.sched.paused.release(queue); len(held) > 0 {
			go w.sched.start(held) // not on the control topic's reader
		}
	}
	if w.cfg.metricsPerQueue {
		w.metrics.paused.WithLabelValues(queue).Set(v)
	}
}

// pauseCheck is how often a task of a paused queue looks whether it may
// start.
const pauseCheck = 100 * time.Millisecond

// waitUnpaused holds a fetched task of a paused queue until the queue is
// resumed, in its slot: nothing of a paused queue starts. It gives up,
// leaving the task to run later, when its partition is revoked or the
// worker stops.
func (w *Worker) waitUnpaused(it *item, queue string) error {
	for w.control.Paused(queue) {
		if it.stale() || w.stopping.Load() {
			return errCanceledRun
		}
		if !sleep(pauseCheck, w.sched.quit) {
			return errCanceledRun
		}
	}
	return nil
}

// waitLimit holds a task of a limited queue in its slot until the queue's
// limit lets it start (package internal/limit): a limited task waits,
// and its wait spends no attempt. It gives up, leaving the task to run
// later, when its partition is revoked or the worker stops. Its Release
// ends the task's claim; without a limit it is nil.
func (w *Worker) waitLimit(it *item, queue string, task *onceq.Task) (limit.Release, error) {
	if w.limits.Limit(queue).None() {
		return nil, nil
	}
	label := w.qlabel(queue)
	waiting := w.metrics.limited.WithLabelValues(label)
	waiting.Inc()
	defer waiting.Dec()
	start := time.Now()
	hold := timeToRun(task, w.cfg.taskTimeout) + w.cfg.abandonGrace
	rel, _, err := w.limits.Acquire(context.Background(), queue, hold, func() bool {
		select {
		case <-w.sched.quit:
			return true
		default:
		}
		return it.stale() || w.stopping.Load()
	})
	switch {
	case errors.Is(err, limit.ErrGone):
		return nil, errCanceledRun
	case err != nil:
		return nil, err
	}
	w.metrics.limitWait.WithLabelValues(label).Observe(time.Since(start).Seconds())
	return rel, nil
}
