package consumer

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/checkpoint"
)

// restoreChunk is how many changelog entries one Apply writes.
const restoreChunk = 20_000

// maxRestoreBatch bounds the partitions one restore pass takes: a pass
// writes one fence to each, in one produce, and reads them with one
// consumer.
const maxRestoreBatch = 5_000

// Restores run in passes: a partition's first record asks for its restore
// (holdIfRestoring) and the partitions asking meanwhile join the next pass.
// A worker over many queues restores each queue's partition on its first
// task; in passes, a thousand of them cost one produce of fences and one
// consumer, not a thousand of each.
//
// restoreQueue is the partitions waiting for a pass; restoring says a
// pass is running (its goroutine takes the next pass when it ends).
type restoreQueue struct {
	waiting []*partState
	running bool
}

// requestRestore queues ps for the next restore pass, starting the passes'
// goroutine if none runs.
func (w *Worker) requestRestore(ps *partState) {
	w.restoresMu.Lock()
	defer w.restoresMu.Unlock()
	w.restores.waiting = append(w.restores.waiting, ps)
	if !w.restores.running {
		w.restores.running = true
		go w.restorePasses()
	}
}

// restorePasses runs restore passes while partitions wait for one.
func (w *Worker) restorePasses() {
	for {
		w.restoresMu.Lock()
		batch := w.restores.waiting
		if len(batch) > maxRestoreBatch {
			batch, w.restores.waiting = batch[:maxRestoreBatch:maxRestoreBatch], batch[maxRestoreBatch:]
		} else {
			w.restores.waiting = nil
		}
		if len(batch) == 0 {
			w.restores.running = false
			w.restoresMu.Unlock()
			return
		}
		w.restoresMu.Unlock()
		live := batch[:0]
		for _, ps := range batch {
			if !ps.isRevoked() {
				live = append(live, ps)
			}
		}
		w.restorePass(live)
	}
}

// restorePass catches the partitions up with their changelogs, then
// releases their held records. A pass that fails is tried again after a
// second, with the partitions still owned, until the worker stops.
func (w *Worker) restorePass(parts []*partState) {
	if len(parts) == 0 {
		return
	}
	start := time.Now()
	parts, err := w.prepare(parts)
	if err == nil && len(parts) == 0 {
		return
	}
	var n int
	if err == nil {
		n, err = w.replayChangelogs(parts)
	}
	if err == nil {
		for _, ps := range parts {
			if err = w.restoreFinished(ps); err != nil {
				break
			}
		}
	}
	if err != nil {
		w.cfg.log.Error("restoring partitions from their changelogs failed; retrying", "partitions", len(parts), "err", err)
		time.Sleep(time.Second)
		if w.stopping.Load() {
			return
		}
		for _, ps := range parts {
			if !ps.isRevoked() {
				w.requestRestore(ps)
			}
		}
		return
	}
	took := time.Since(start)
	w.metrics.restore.Observe(took.Seconds())
	if len(parts) == 1 {
		w.cfg.log.Info("partition restored", "topic", parts[0].tp.Topic, "partition", parts[0].tp.Partition, "changelog_records", n, "took", took.Round(time.Millisecond))
	} else {
		w.cfg.log.Info("partitions restored", "partitions", len(parts), "changelog_records", n, "took", took.Round(time.Millisecond))
	}
	for _, ps := range parts {
		w.releaseHeld(ps)
	}
}

// prepare makes the topics of the parts' queues that a pattern matched
// (prepareQueues) and returns the parts it could, leaving the others held,
// with an error logged: a queue whose changelog cannot be named.
func (w *Worker) prepare(parts []*partState) ([]*partState, error) {
	var queues []string
	for _, ps := range parts {
		queues = append(queues, ps.tp.Topic)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	refused, err := w.prepareQueues(ctx, queues)
	if err != nil {
		return parts, err
	}
	if len(refused) == 0 {
		return parts, nil
	}
	ok := parts[:0]
	for _, ps := range parts {
		if why := refused[ps.tp.Topic]; why != nil {
			w.cfg.log.Error("a queue matched by a pattern cannot be run: its tasks wait", "queue", ps.tp.Topic, "partition", ps.tp.Partition, "err", why)
			continue
		}
		ok = append(ok, ps)
	}
	return ok, nil
}

// releaseHeld schedules the records ps held while it restored. Records fetched meanwhile join held; restored is set only
// once held is empty, so the records are queued in offset order.
func (w *Worker) releaseHeld(ps *partState) {
	for {
		ps.mu.Lock()
		held := ps.held
		ps.held = nil
		if len(held) == 0 {
			ps.restored = true
			ps.mu.Unlock()
			w.ahead.consider(ps) // behind a backlog: read ahead of the fetch
			break
		}
		ps.mu.Unlock()
		w.schedule(ps, held)
	}
}

// replayChangelogs replays the changelog partition of each partition from
// the offset its checkpoint recorded up to a fence the pass writes at the
// changelog partition's end, and returns how many records it applied.
//
// Why a fence and not the last stable offset: a broker that restarts after
// a crash may abort open transactions without writing their markers (the
// embedded broker does), so the last stable offset can lie past records no
// read_committed reader ever receives, and waiting for it would never end.
// The fence is a plain record: once it is read, every transaction before
// it is settled and read.
func (w *Worker) replayChangelogs(parts []*partState) (int, error) {
	if w.store == nil {
		return 0, nil
	}
	// A checkpoint write in flight may be for these partitions, from when
	// the worker last owned them: let it land first.
	_ = w.ckpt.wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The changelog partition of a queue's partition p is partition p of
	// the queue's changelog topic.
	source := map[string]string{} // changelog topic -> queue
	for _, ps := range parts {
		source[broker.ChangelogTopic(w.cfg.group, ps.tp.Topic)] = ps.tp.Topic
	}
	// A partition whose checkpoint is at its changelog's end has nothing
	// to read, and needs no fence: every transaction of its previous
	// owner ended before its first record was fetched (holdIfRestoring),
	// so nothing before that end is still to come. That is every new
	// queue's case, which then restores with one request.
	ends, err := w.admin.Kadm().ListEndOffsets(ctx, slices.Collect(maps.Keys(source))...)
	if err != nil {
		return 0, fmt.Errorf("listing the changelogs' end offsets: %w", err)
	}
	fencing := map[string][]int32{}
	var behind []*partState
	for _, ps := range parts {
		topic := broker.ChangelogTopic(w.cfg.group, ps.tp.Topic)
		if o, ok := ends.Lookup(topic, ps.tp.Partition); ok && o.Err == nil {
			cur, found, err := w.store.Checkpoint(ps.tp)
			if err != nil {
				return 0, err
			}
			// (A checkpoint past the end: the changelog was recreated,
			// which the fence below finds.)
			if found && cur.Changelog == o.Offset || !found && o.Offset == 0 {
				continue
			}
		}
		fencing[topic] = append(fencing[topic], ps.tp.Partition)
		behind = append(behind, ps)
	}
	if len(behind) == 0 {
		return 0, nil
	}
	parts = behind
	fences, err := broker.WriteFencesTo(ctx, w.cfg.conn, fencing, func(string, int32) *kgo.Record {
		k, v := checkpoint.EncodeFence()
		return &kgo.Record{Key: k, Value: v}
	})
	if err != nil {
		return 0, fmt.Errorf("writing the changelog fences: %w", err)
	}
	// From where each partition reads; one whose checkpoint is at its
	// fence has nothing to read.
	type replay struct {
		entries []checkpoint.Entry
		fence   int64
	}
	replays := map[checkpoint.TP]*replay{}
	from := map[string]map[int32]int64{}
	applied := 0
	for _, ps := range parts {
		topic := broker.ChangelogTopic(w.cfg.group, ps.tp.Topic)
		fence := fences[topic][ps.tp.Partition]
		cur, ok, err := w.store.Checkpoint(ps.tp)
		if err != nil {
			return 0, err
		}
		at := int64(0)
		if ok && cur.Changelog > 0 {
			at = cur.Changelog
		}
		if at > fence+1 {
			// The changelog is shorter than what the checkpoint saw: it
			// was recreated. Start over from it.
			w.cfg.log.Warn("checkpoint is ahead of its changelog: rebuilding the partition", "topic", ps.tp.Topic, "partition", ps.tp.Partition,
				"checkpoint", at, "changelog_end", fence+1)
			if err := w.store.DropPartition(ps.tp); err != nil {
				return 0, err
			}
			at = 0
		}
		if at >= fence {
			if err := w.store.Apply(ps.tp, nil, fence+1); err != nil {
				return 0, err
			}
			continue
		}
		replays[ps.tp] = &replay{fence: fence}
		if from[topic] == nil {
			from[topic] = map[int32]int64{}
		}
		from[topic][ps.tp.Partition] = at
	}
	apply := func(tp checkpoint.TP, r *replay, next int64) error {
		if err := w.store.Apply(tp, r.entries, next); err != nil {
			return err
		}
		applied += len(r.entries)
		r.entries = r.entries[:0]
		return nil
	}
	var fnErr error // an error of the callback, returned as it is
	err = broker.ReadTopics(ctx, w.cfg.conn, from, func(rec *kgo.Record) (bool, error) {
		tp := checkpoint.TP{Topic: source[rec.Topic], Partition: rec.Partition}
		r := replays[tp]
		if rec.Offset >= r.fence {
			fnErr = apply(tp, r, r.fence+1)
			return true, fnErr
		}
		e, err := checkpoint.DecodeChangelog(rec.Key, rec.Value)
		if err != nil {
			fnErr = fmt.Errorf("changelog %s/%d offset %d: %w", rec.Topic, rec.Partition, rec.Offset, err)
			return true, fnErr
		}
		e.Offset = rec.Offset
		r.entries = append(r.entries, e)
		if len(r.entries) >= restoreChunk {
			fnErr = apply(tp, r, rec.Offset+1)
		}
		return false, fnErr
	}, kgo.FetchMaxBytes(32<<20))
	if fnErr != nil {
		return applied, fnErr
	}
	if err != nil {
		return applied, fmt.Errorf("reading the changelogs: %w", err)
	}
	return applied, nil
}
