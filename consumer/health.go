package consumer

import (
	"fmt"

	"github.com/onceq/onceq/internal/ops"
)

// Healthy returns nil while the worker works: before Run, and while Run
// reaches the brokers and is a member of its group. It reports a worker
// that heard from no broker for its session timeout, whose group session
// broke and was not joined again, or whose Run returned: what a liveness
// probe (/healthz) asks.
func (w *Worker) Healthy() error { return w.health.Healthy() }

// Ready returns nil once Run joined the group and every partition it owns
// that has records caught up with its changelog, until Run returns: the
// worker runs tasks. A partition restores on its first record, so an idle
// one holds nothing back. It is what a readiness probe (/readyz) asks.
func (w *Worker) Ready() error {
	if err := w.health.Ready(nil); err != nil {
		return err
	}
	for _, ps := range w.snapshotParts() {
		ps.mu.Lock()
		restoring := ps.restoring && !ps.restored
		ps.mu.Unlock()
		if restoring {
			return fmt.Errorf("consumer: restoring %s from its changelog", ps.tp)
		}
	}
	return nil
}

var _ ops.Checker = (*Worker)(nil)
