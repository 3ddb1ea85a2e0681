package inspect

import (
	"context"
	"fmt"

	"github.com/onceq/onceq/internal/ctltopic"
)

// CancelRequested reports whether a cancel of task id of queue is in the
// control topic and has not lapsed: it was asked for and has not taken
// effect yet (a worker removes it when the task ends). A workflow's
// cancel stays while the workflow runs.
func (in *Inspector) CancelRequested(ctx context.Context, queue, id string) (bool, error) {
	r, err := in.controlReader(ctx)
	if err != nil {
		return false, err
	}
	return r.Canceled(queue, id), nil
}

// controlReader returns the inspector's reader of the control topic,
// opening it on first use.
func (in *Inspector) controlReader(ctx context.Context) (*ctltopic.Reader, error) {
	in.controlMu.Lock()
	defer in.controlMu.Unlock()
	if in.control != nil {
		return in.control, nil
	}
	r, err := ctltopic.Open(ctx, in.cfg.conn, in.cfg.log, nil)
	if err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	in.control = r
	return r, nil
}

// Paused returns the queues that are paused now, as the control topic
// says: the inspector's reader of the topic, opened on first use, catches
// up with its end (one request) before it answers.
func (in *Inspector) Paused(ctx context.Context) (map[string]bool, error) {
	r, err := in.controlReader(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.Sync(ctx); err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	return r.PausedQueues(), nil
}
