package inspect

import (
	"testing"

	"github.com/onceq/onceq"
)

// TestSupersedes: which record of a task the view keeps when another
// comes: a worker's always replaces; a producer's (its submission) never
// hides a worker's nor a final one; a final record without a worker (a
// destroyed queue's task) ends a task whatever its last record said,
// unless a worker finished it; a running record replaces a final one
// only for a run that started after it ended.
func TestSupersedes(t *testing.T) {
	rec := func(st onceq.TaskState, worker bool) meta { return meta{state: stateIndex(st), worker: worker} }
	pending, scheduled := rec(onceq.StatePending, false), rec(onceq.StateScheduled, false)
	retrying, scheduledByWorker := rec(onceq.StateRetrying, true), rec(onceq.StateScheduled, true)
	succeeded, destroyed := rec(onceq.StateSucceeded, true), rec(onceq.StateCanceled, false)
	running := func(started int64) meta {
		return meta{state: stateIndex(onceq.StateRunning), worker: true, last: started}
	}
	ended := func(st onceq.TaskState, at int64) meta { return meta{state: stateIndex(st), worker: true, last: at} }
	for _, tc := range []struct {
		name     string
		new, old meta
		want     bool
	}{
		{"pending after pending", pending, pending, true},
		{"scheduled after pending", scheduled, pending, true},
		{"pending after a worker's retrying", pending, retrying, false},
		{"pending after a worker's success", pending, succeeded, false},
		{"pending after a destroyed task's", pending, destroyed, false},
		{"destroyed after pending", destroyed, pending, true},
		{"destroyed after a worker's retrying", destroyed, retrying, true},
		{"destroyed after a worker's snooze", destroyed, scheduledByWorker, true},
		{"destroyed after a worker's success", destroyed, succeeded, false},
		{"a worker's success after destroyed", succeeded, destroyed, true},
		{"a worker's retrying after a success", retrying, succeeded, true},
		{"running after pending", running(1000), pending, true},
		{"running after a worker's retrying", running(1000), retrying, true},
		{"pending after running", pending, running(1000), false},
		{"a success after running", succeeded, running(1000), true},
		{"a lost run's running after its task's success", running(1000), ended(onceq.StateSucceeded, 2000), false},
		{"a requeued task's running after its death", running(3000), ended(onceq.StateDead, 2000), true},
		{"a run's running after its task's cancel", running(1000), ended(onceq.StateCanceled, 2000), false},
	} {
		if got := tc.new.supersedes(tc.old); got != tc.want {
			t.Errorf("%s: supersedes %v, want %v", tc.name, got, tc.want)
		}
	}
}
