package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/internal/ctltopic"
)

// What a Cancel did, as CancelAnswer.Outcome says.
const (
	// CancelUnknown: the view holds no record of the task (never
	// submitted, submitted without a record, or finished longer ago than
	// the records are kept). Nothing was written: CancelAhead cancels it
	// all the same.
	CancelUnknown = "unknown"
	// CancelFinal: the task was already final (succeeded, dead, expired,
	// canceled), as Record says. Nothing was written.
	CancelFinal = "final"
	// CancelDone: the task ended canceled: it never ran, or it was
	// running and gave up when its context was canceled.
	CancelDone = "canceled"
	// CancelTooLate: the task was running and finished (Record says how)
	// before the cancel reached it, or in spite of it. The cancel was
	// withdrawn.
	CancelTooLate = "too_late"
	// CancelPending: the cancel is recorded, and the task had not reached
	// a worker by the end of the wait (scheduled, retrying, or waiting in
	// its queue): it ends canceled when it does, if that is before Until.
	CancelPending = "pending"
	// CancelAheadOf: the view knew no record of the task, and the cancel
	// was written as CancelAhead asked: the first submission of the ID
	// that reaches a worker before Until ends canceled.
	CancelAheadOf = "ahead"
)

// DefaultCancelWait is how long Cancel waits, by default, for a task that
// may be running, or about to run, to end: long enough for a worker to
// read the cancel, cancel the handler's context and commit.
const DefaultCancelWait = 3 * time.Second

// CancelAnswer is what Cancel did.
type CancelAnswer struct {
	// Outcome is one of CancelUnknown, CancelFinal, CancelDone,
	// CancelTooLate, CancelPending and CancelAheadOf.
	Outcome string
	// Record is the task's last record: as it was for CancelFinal and
	// CancelPending, its final one for CancelDone and CancelTooLate.
	Record onceq.TaskRecord
	// Until is when a cancel written lapses: one dedup window (the
	// inspector's Retention) after it was written.
	Until time.Time
}

// Canceled reports whether the task is or will be canceled.
func (a CancelAnswer) Canceled() bool {
	return a.Outcome == CancelDone || a.Outcome == CancelPending || a.Outcome == CancelAheadOf
}

// CancelOpt is an option of Cancel.
type CancelOpt func(*cancelConfig)

type cancelConfig struct {
	ahead      bool
	notRunning bool
	wait       time.Duration
}

// CancelAhead cancels a task of which the view knows no record, in case
// it is waiting unrecorded or is submitted later: the first submission
// of the ID to reach a worker within the dedup window ends canceled.
// Default: off (an unknown task is CancelUnknown, and nothing is
// written).
func CancelAhead() CancelOpt { return func(c *cancelConfig) { c.ahead = true } }

// CancelNotRunning tells Cancel that the task is not running and cannot
// start before the cancel reaches its workers, as the HTTP server knows
// of a job it never handed out and now never will: its record ends
// canceled at once, whatever its state, as it does for a task due later
// (see Cancel). Default: off.
func CancelNotRunning() CancelOpt { return func(c *cancelConfig) { c.notRunning = true } }

// CancelWait sets how long Cancel waits for a task that may be running,
// or about to run, to end, so that its answer says which way it ended.
// 0 does not wait. Default DefaultCancelWait (3s), and never past ctx.
func CancelWait(d time.Duration) CancelOpt { return func(c *cancelConfig) { c.wait = max(d, 0) } }

// Cancel cancels a task and answers what it did (CancelAnswer.Outcome):
//
//   - a task of which the view knows no record is CancelUnknown, and
//     nothing is written, unless CancelAhead asks for a cancel ahead of
//     its submission (CancelAheadOf);
//   - a task already final is CancelFinal, and nothing is written;
//   - otherwise the cancel is written to the control topic: workers end
//     the task canceled instead of running it and, if it is running,
//     cancel its context. Cancel waits (CancelWait) for its end unless it
//     is due later than that: CancelDone if it ended canceled,
//     CancelTooLate if it finished anyway (the cancel is then withdrawn),
//     CancelPending if it has not reached a worker yet.
//
// A task that cannot be running, since it is due later (scheduled, or
// retrying, in the delay buckets) but before the cancel lapses, or the
// caller says so (CancelNotRunning), also has its record end canceled at
// once, so that
// every reader of the records (task get and wait, queue stats, the
// console) sees it canceled from then on, not pending or overdue until a
// worker reaches it. The worker that does writes its own canceled record
// over it.
//
// A cancel lapses after one dedup window (Retention), and the worker that
// ends the task removes it, however the task ends: it never cancels a
// later submission of the ID, but for CancelAhead.
func (c *Controller) Cancel(ctx context.Context, queue, id string, opts ...CancelOpt) (CancelAnswer, error) {
	cfg := cancelConfig{wait: DefaultCancelWait}
	for _, o := range opts {
		o(&cfg)
	}
	if err := onceq.ValidateTaskQueue(queue); err != nil {
		return CancelAnswer{}, err
	}
	if err := onceq.ValidateID(id); err != nil {
		return CancelAnswer{}, err
	}
	r, err := c.in.Get(ctx, queue, id)
	unknown := errors.Is(err, inspect.ErrNotFound) || errors.Is(err, inspect.ErrNoQueue)
	switch {
	case err != nil && !unknown:
		return CancelAnswer{}, err
	case unknown && !cfg.ahead:
		return CancelAnswer{Outcome: CancelUnknown}, nil
	case err == nil && r.State.Final():
		return CancelAnswer{Outcome: CancelFinal, Record: r}, nil
	}
	now := time.Now()
	a := CancelAnswer{Outcome: CancelPending, Record: r, Until: now.Add(c.in.Retention())}
	if unknown {
		a.Outcome = CancelAheadOf
	}
	if err := c.writeCancel(ctx, ctltopic.Entry{Queue: queue, ID: id, At: now, Until: a.Until}); err != nil {
		return CancelAnswer{}, err
	}
	if !unknown && (cfg.notRunning || r.Due.After(now) && r.Due.Before(a.Until)) {
		if err := c.recordCanceled(ctx, r, now); err != nil {
			return CancelAnswer{}, err
		}
	}
	if unknown || cfg.wait == 0 || r.Due.After(now.Add(cfg.wait)) {
		return a, nil
	}
	wctx, cancel := context.WithTimeout(ctx, cfg.wait)
	defer cancel()
	end, err := c.in.Wait(wctx, queue, id)
	switch {
	case err != nil && wctx.Err() != nil && ctx.Err() == nil:
		return a, nil // not ended within the wait: pending
	case err != nil:
		return a, err
	case end.State == onceq.StateCanceled:
		return CancelAnswer{Outcome: CancelDone, Record: end, Until: a.Until}, nil
	}
	// It finished in spite of the cancel: the cancel names a run that is
	// over. Its worker removed it if it saw it; this makes sure.
	if err := c.writeCancel(ctx, ctltopic.Entry{Queue: queue, ID: id, Deleted: true}); err != nil {
		return CancelAnswer{}, err
	}
	return CancelAnswer{Outcome: CancelTooLate, Record: end}, nil
}

// CancelWorkflow writes the cancel of workflow id, whatever its state:
// workers end its start task canceled if it has not started, and each of
// its steps canceled instead of starting it, whenever the step comes. The
// cancel stays in the control topic for the steps yet to come. Package
// workflow's Cancel, which first checks that the workflow is not done, is
// the one to call.
func (c *Controller) CancelWorkflow(ctx context.Context, id string) error {
	return c.writeCancel(ctx, ctltopic.Entry{Queue: onceq.WorkflowQueue, ID: id, At: time.Now()})
}

// recordCanceled writes, to its queue's records topic, the canceled
// record of a task the cancel reaches before any worker can run it. It
// names no Worker, as a producer's records do: the worker that reaches
// the task writes its own over it.
func (c *Controller) recordCanceled(ctx context.Context, r onceq.TaskRecord, now time.Time) error {
	tr := onceq.TaskRecord{ID: r.ID, Queue: r.Queue, State: onceq.StateCanceled, Attempt: r.Attempt, MaxAttempts: r.MaxAttempts,
		Priority: r.Priority, Enqueued: r.Enqueued, Finished: now, Reason: "canceled", Partition: r.Partition}
	rec := &kgo.Record{Topic: broker.RecordsTopic(onceq.QueueTopic(r.Queue)), Key: []byte(r.ID), Value: tr.AppendJSON(nil)}
	cl, err := c.in.Conn().NewClient(kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		return fmt.Errorf("control: recording task %s of %s canceled: %w", r.ID, r.Queue, err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("control: recording task %s of %s canceled: %w", r.ID, r.Queue, err)
	}
	return nil
}

func (c *Controller) writeCancel(ctx context.Context, e ctltopic.Entry) error {
	if err := ctltopic.Write(ctx, c.in.Conn(), e); err != nil {
		return fmt.Errorf("control: canceling task %s of %s: %w", e.ID, e.Queue, err)
	}
	return nil
}

// Describe says in a sentence what the cancel of task id of queue did.
func (a CancelAnswer) Describe(queue, id string) string {
	task := "task " + id + " of " + queue
	until := a.Until.UTC().Format(time.RFC3339)
	switch a.Outcome {
	case CancelUnknown:
		return task + ": no record of it (never submitted, submitted without a record, or finished longer ago than the records are kept): nothing canceled"
	case CancelFinal:
		return task + " is already " + string(a.Record.State) + ": nothing to cancel"
	case CancelDone:
		if !a.Record.Started.IsZero() {
			return "canceled " + task + ": it was running, its context was canceled, and it ended canceled"
		}
		return "canceled " + task + ": it ended canceled without running"
	case CancelTooLate:
		return task + " was running and ended " + string(a.Record.State) + " before the cancel reached it: not canceled"
	case CancelPending:
		what := "it ends canceled instead of running when it reaches a worker"
		if !a.Record.Due.IsZero() {
			what += " (due " + a.Record.Due.UTC().Format(time.RFC3339) + ")"
		}
		return "canceled " + task + ": " + what + "; the cancel lapses at " + until
	case CancelAheadOf:
		return "canceled " + task + " ahead: no record of it yet; the first submission of it to reach a worker before " + until + " ends canceled"
	}
	return task + ": " + a.Outcome
}
