package consumer

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
)

// Runs in progress. A handler that runs past RecordRunningAfter gets a
// running record (onceq.StateRunning: the worker, the start) in the next
// commit's transaction, written like the outcomes' records: to its
// partition's records batch key, so that it lands before the outcome's
// record, which the run writes in a later commit. Runs shorter than that,
// the usual case, are never looked at by the commit.
//
// A handler whose run waits for its work to start elsewhere says so
// (Task.AwaitsStart, Task.WorkStarts): its running record counts from
// then.
//
// The watchdog, which looks at every running handler anyway, notices a
// run that is due (noteRunning) and wakes the commit loop; the commit
// then scans the slots (appendRunning), and marks the runs it wrote once
// its transaction committed.

// noteRunning is called by the watchdog with a run still in its slot: if
// the run is due for its running record, it flags the commit loop and
// wakes its poll; it returns next, or the run's due time if earlier.
func (w *Worker) noteRunning(r *handlerRun, now, next time.Time) time.Time {
	after := w.cfg.runningAfter
	from := r.from.Load()
	if after == 0 || !w.cfg.taskRecords || r.recorded.Load() || from == 0 {
		return next
	}
	if at := time.Unix(0, from).Add(after); now.Before(at) {
		if at.Before(next) {
			return at
		}
		return next
	}
	if !w.runningDue.Swap(true) {
		w.cutIdlePoll() // there is a record to commit
	}
	return next
}

// appendRunning appends the running records of the runs due for one, of
// the partitions a commit covers (live), as JSON lines batched per
// partition's records key, and returns the runs written, which the
// commit marks recorded once it committed (markRunning). Many runs of a
// partition take a few Kafka records, each within the batch limit. A run
// whose handler returned meanwhile is past its slot (endRun vacates it
// before its result exists), so its outcome comes in a later commit,
// after this record.
func (w *Worker) appendRunning(recs []*kgo.Record, live map[*partState]bool, now time.Time) ([]*kgo.Record, []*handlerRun) {
	var (
		runs    []*handlerRun
		batches map[*partState]*lineBatch
		order   []*partState
	)
	w.sched.running(func(r *handlerRun) {
		from := r.from.Load()
		if r.recorded.Load() || r.state.Load() != runRunning || from == 0 || now.Sub(time.Unix(0, from)) < w.cfg.runningAfter || !live[r.it.ps] {
			return
		}
		ps := r.it.ps
		b, ok := batches[ps]
		if !ok {
			if batches == nil {
				batches = map[*partState]*lineBatch{}
			}
			b = w.recordBatch(ps.recordsTopic, ps.recordsKey, 0)
			batches[ps] = b
			order = append(order, ps)
		}
		tr := runningRecord(r, time.Unix(0, from), w.instanceID)
		recs = b.add(recs, &tr)
		runs = append(runs, r)
	})
	for _, ps := range order {
		recs = batches[ps].flush(recs)
	}
	return recs, runs
}

// runningRecord is the running record of run r, whose work started at
// from, on worker instance.
func runningRecord(r *handlerRun, from time.Time, instance string) onceq.TaskRecord {
	t, src := r.task, r.it.rec
	tr := onceq.TaskRecord{ID: t.ID, Queue: src.Topic, State: onceq.StateRunning, Attempt: t.Attempt, MaxAttempts: t.MaxAttempts,
		Priority: t.Priority, Enqueued: t.Enqueued, Started: from, Worker: instance, Partition: src.Partition, Offset: src.Offset}
	if onceq.QueueTopic(t.Queue) == src.Topic {
		tr.Queue = t.Queue // a lane queue of the topic
	}
	return tr
}

// markRunning marks runs recorded, once the commit that wrote their
// records committed; after an abort they are written again.
func (w *Worker) markRunning(runs []*handlerRun, committed bool) {
	if !committed {
		if len(runs) > 0 {
			w.runningDue.Store(true)
		}
		return
	}
	for _, r := range runs {
		r.recorded.Store(true)
	}
}

// AwaitsStart tells the worker that the run waits, from now, for its work
// to start outside the worker (onceq serve's handler waits so for an
// HTTP consumer to take its job): it is not recorded running, however
// long it waits, until WorkStarts.
func (t *Task) AwaitsStart() {
	if t.run != nil {
		t.run.from.Store(0)
	}
}

// WorkStarts tells the worker that the run's work started now, after
// AwaitsStart: it is recorded running, from now, once its work has run
// RecordRunningAfter. It does nothing without AwaitsStart, or a second
// time.
func (t *Task) WorkStarts() {
	if t.run != nil {
		t.run.from.CompareAndSwap(0, time.Now().UnixNano())
	}
}
