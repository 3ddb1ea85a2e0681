package inspect

import (
	"testing"

	"github.com/onceq/onceq"
)

// TestSupersedes: which record of a task the view keeps when another
// comes: a worker's always replaces; a producer's (its submission) never
// hides a worker's nor a final one; a final record without a worker (a
// destroyed queue's task) ends a task whatever its last record said,
// unless a worker finished it.
func TestSupersedes(t *testing.T) {
	rec := func(st onceq.TaskState, worker bool) meta { return meta{state: stateIndex(st), worker: worker} }
	pending, scheduled := rec(onceq.StatePending, false), rec(onceq.StateScheduled, false)
	retrying, scheduledByWorker := rec(onceq.StateRetrying, true), rec(onceq.StateScheduled, true)
	succeeded, destroyed := rec(onceq.StateSucceeded, true), rec(onceq.StateCanceled, false)
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
	} {
		if got := tc.new.supersedes(tc.old); got != tc.want {
			t.Errorf("%s: supersedes %v, want %v", tc.name, got, tc.want)
		}
	}
}
