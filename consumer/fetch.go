package consumer

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/checkpoint"
)

// dispatch admits fetched records and hands them to the scheduler, or
// holds them while their partition restores from its changelog.
func (w *Worker) dispatch(fs kgo.Fetches) {
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		if len(fp.Records) == 0 {
			return
		}
		tp := checkpoint.TP{Topic: fp.Topic, Partition: fp.Partition}
		w.mu.Lock()
		ps := w.parts[tp]
		w.mu.Unlock()
		if ps == nil {
			return // not ours (any more)
		}
		ps.queueMu.Lock()
		defer ps.queueMu.Unlock()
		last := fp.Records[len(fp.Records)-1]
		ps.lag.Store(fp.HighWatermark - last.Offset - 1)
		items := ps.admit(fp.Records)
		w.buffered.Add(int64(len(items)))
		ps.mu.Lock()
		ps.q.seen = max(ps.q.seen, last.Offset+1)
		if len(items) > 0 {
			ps.q.active = time.Now()
		}
		ps.mu.Unlock()
		if len(items) == 0 {
			return
		}
		if w.holdIfRestoring(ps, items) {
			return
		}
		w.schedule(ps, items)
		w.ahead.consider(ps)
	})
}

// schedule looks the items' dedup keys up in one batch and queues them.
func (w *Worker) schedule(ps *partState, items []*item) {
	if err := ps.lookup(items); err != nil {
		w.cfg.log.Warn("looking up processed IDs; each task asks again when it starts", "err", err)
	}
	w.sched.submit(ps, items)
}

// holdIfRestoring holds items while ps restores, starting the restore on
// the first record: by then the group's committed offset was fetched as
// stable, so every transaction of the previous owner is complete and the
// changelog holds all of its marks.
func (w *Worker) holdIfRestoring(ps *partState, items []*item) bool {
	ps.mu.Lock()
	if ps.restored {
		ps.mu.Unlock()
		return false
	}
	ps.held = append(ps.held, items...)
	start := !ps.restoring
	ps.restoring = true
	ps.mu.Unlock()
	if start {
		// Its fetching goes on: what arrives meanwhile is held too, within
		// the worker's bound on buffered records. Stopping it would cost
		// the client a copy of its paused set twice per partition.
		w.requestRestore(ps)
	}
	return true
}

// restoreFinished takes from the restored checkpoint the records finished
// above the partition's committed offset (they are acknowledged without
// running), and builds the filter of its state keys, while its records
// wait.
func (w *Worker) restoreFinished(ps *partState) error {
	if w.store == nil {
		return nil
	}
	if err := w.store.WarmState(ps.tp); err != nil {
		return err
	}
	cur, ok, err := w.store.Checkpoint(ps.tp)
	if err != nil || !ok {
		return err
	}
	ps.mu.Lock()
	ps.finished = cur.Finished
	ps.mu.Unlock()
	return nil
}
