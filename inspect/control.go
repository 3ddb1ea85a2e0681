package inspect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/control"
)

// Cancel cancels a task that has not started: it never starts, and ends
// canceled (workers check each task before they run it; a delayed task is
// ended when it reaches a worker, at once). A task already done is left
// as it is: Cancel returns its record, whose final state says so. For any
// other, it returns the record it has, if any (pending, scheduled or
// retrying: a task retrying ends canceled before its next attempt).
//
// A task a worker fetched before it read the cancel (milliseconds after
// it is written) runs; its record then tells which happened.
func (in *Inspector) Cancel(ctx context.Context, queue, id string) (onceq.TaskRecord, error) {
	r, err := in.Get(ctx, queue, id)
	switch {
	case err == nil && r.State.Final():
		return r, nil
	case err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrNoQueue):
		return r, err
	}
	return r, in.writeCancel(ctx, queue, id)
}

// CancelWorkflow writes the cancel of workflow id, whatever its state:
// workers end its start task canceled if it has not started, and each of
// its steps canceled instead of starting it, whenever the step comes. The
// cancel stays in the control topic for the steps yet to come. Package
// workflow's Cancel, which first checks that the workflow is not done, is
// the one to call.
func (in *Inspector) CancelWorkflow(ctx context.Context, id string) error {
	return in.writeCancel(ctx, onceq.WorkflowQueue, id)
}

func (in *Inspector) writeCancel(ctx context.Context, queue, id string) error {
	if err := control.Write(ctx, in.cfg.conn, control.Entry{Queue: queue, ID: id, At: time.Now()}); err != nil {
		return fmt.Errorf("inspect: canceling task %s of %s: %w", id, queue, err)
	}
	return nil
}

// Pause stops a queue: workers stop fetching it within a second, and start
// none of its tasks until Resume. The pause is kept in the control topic,
// so it holds across restarts; nothing of the queue is lost.
func (in *Inspector) Pause(ctx context.Context, queue string) error {
	return in.setPaused(ctx, queue, true)
}

// Resume lets workers run a paused queue again.
func (in *Inspector) Resume(ctx context.Context, queue string) error {
	return in.setPaused(ctx, queue, false)
}

func (in *Inspector) setPaused(ctx context.Context, queue string, paused bool) error {
	if err := onceq.ValidateQueue(queue); err != nil {
		return err
	}
	if err := control.Write(ctx, in.cfg.conn, control.Entry{Queue: queue, Paused: paused, At: time.Now()}); err != nil {
		return fmt.Errorf("inspect: pausing or resuming %s: %w", queue, err)
	}
	return nil
}

// Paused returns the queues that are paused now, as the control topic
// says.
func (in *Inspector) Paused(ctx context.Context) (map[string]bool, error) {
	r, err := control.Open(ctx, in.cfg.conn, in.cfg.log, nil)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.PausedQueues(), nil
}
