package consumer

import (
	"errors"
	"fmt"

	"github.com/onceq/onceq/internal/ops"
)

// Run's phases, for Healthy and Ready.
const (
	phaseNotStarted int32 = iota
	phaseRunning
	phaseStopped
)

// Healthy returns nil while the worker works: before Run, and while Run
// reaches the brokers and is a member of its group. It reports a worker
// that heard from no broker for its session timeout, whose group session
// broke and was not joined again, or whose Run returned: what a liveness
// probe (/healthz) asks.
func (w *Worker) Healthy() error {
	switch w.phase.Load() {
	case phaseNotStarted:
		return nil
	case phaseStopped:
		return errors.New("consumer: stopped")
	}
	if err := w.health.Healthy(); err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	return nil
}

// Ready returns nil once Run joined the group and every partition it owns
// that has records caught up with its changelog, until Run returns: the
// worker runs tasks. A partition restores on its first record, so an idle
// one holds nothing back. It is what a readiness probe (/readyz) asks.
func (w *Worker) Ready() error {
	switch {
	case w.phase.Load() == phaseNotStarted:
		return errors.New("consumer: not started")
	case w.phase.Load() == phaseStopped:
		return errors.New("consumer: stopped")
	case !w.health.HasJoined():
		return errors.New("consumer: joining the group " + w.cfg.group)
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
