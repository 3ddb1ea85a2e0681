package control

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/onceq/onceq/internal/limit"
)

// Limit is a queue's limit across every worker that runs it: at most
// Count starts in any window of Per (plus limit.Margin, 30 ms), and at
// most Running tasks running at once. A zero Count or Running sets no
// limit of that kind. A task its limit holds waits in its worker's slot,
// unstarted: it never fails for it and spends no attempt.
type Limit = limit.Limit

// ParseRate reads a rate as "<count>/<unit>" (10/s, 600/m, 2/h) or
// "<count>/<duration>" (5/250ms).
var ParseRate = limit.ParseRate

// SetLimit sets queue's limit; a Limit of nothing lifts it. Every worker
// reads it within a moment, and holds it across rebalances and restarts:
// it is kept in the limits topic.
func (c *Controller) SetLimit(ctx context.Context, queue string, l Limit) error {
	if err := limit.Set(ctx, c.in.Conn(), queue, l); err != nil {
		return fmt.Errorf("control: the limit of %s: %w", queue, err)
	}
	return nil
}

// QueueLimit is a queue's limit, and how many of its tasks run now
// under it across every worker (their claims admitted and not released
// or ended).
type QueueLimit struct {
	Limit
	RunningNow int
}

// Limits returns the limits set, by queue.
func (c *Controller) Limits(ctx context.Context) (map[string]QueueLimit, error) {
	cl, err := limit.Open(ctx, c.in.Conn(), slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, fmt.Errorf("control: reading the limits: %w", err)
	}
	defer cl.Close()
	out := map[string]QueueLimit{}
	for q, l := range cl.Limits() {
		out[q] = QueueLimit{Limit: l, RunningNow: cl.Running(q)}
	}
	return out, nil
}
