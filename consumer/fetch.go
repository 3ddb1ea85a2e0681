package consumer

import (
	"strconv"
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
		last := fp.Records[len(fp.Records)-1]
		w.metrics.lag.WithLabelValues(fp.Topic, strconv.Itoa(int(fp.Partition))).Set(float64(fp.HighWatermark - last.Offset - 1))
		items := make([]*item, 0, len(fp.Records))
		for _, r := range fp.Records {
			if !ps.admit(r) {
				continue
			}
			items = append(items, &item{ps: ps, rec: r})
		}
		w.buffered.Add(int64(len(items)))
		if w.holdIfRestoring(ps, items) {
			return
		}
		w.schedule(ps, items)
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
	defer ps.mu.Unlock()
	if ps.restored {
		return false
	}
	ps.held = append(ps.held, items...)
	if !ps.restoring {
		ps.restoring = true
		w.kafka.pause(ps.tp)
		go w.restore(ps)
	}
	return true
}

// restore catches ps up with its changelog, then releases its held
// records. It retries until it succeeds, the partition is revoked or the
// worker stops.
func (w *Worker) restore(ps *partState) {
	start := time.Now()
	n, err := w.replayChangelog(ps.tp)
	if err == nil {
		err = w.restoreFinished(ps)
	}
	if err != nil {
		w.cfg.log.Error("restoring partition from changelog failed; retrying", "topic", ps.tp.Topic, "partition", ps.tp.Partition, "err", err)
		time.Sleep(time.Second)
		if !ps.isRevoked() && !w.stopping.Load() {
			go w.restore(ps)
		}
		return
	}
	w.metrics.restore.Observe(time.Since(start).Seconds())
	w.cfg.log.Info("partition restored", "topic", ps.tp.Topic, "partition", ps.tp.Partition, "changelog_records", n, "took", time.Since(start).Round(time.Millisecond))
	// Records fetched meanwhile join held; restored is set only once held
	// is empty, so the records are queued in offset order.
	for {
		ps.mu.Lock()
		held := ps.held
		ps.held = nil
		if len(held) == 0 {
			ps.restored = true
			ps.mu.Unlock()
			break
		}
		ps.mu.Unlock()
		w.schedule(ps, held)
	}
	w.kafka.resume(ps.tp)
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
