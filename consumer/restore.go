package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/checkpoint"
)

// restoreChunk is how many changelog entries one Apply writes.
const restoreChunk = 20_000

// restorer catches a partition's checkpoint up with its changelog.
type restorer struct {
	w *Worker
}

func newRestorer(w *Worker) (*restorer, error) { return &restorer{w: w}, nil }

func (r *restorer) close() {}

// restore replays the changelog partition of tp from the offset the
// checkpoint recorded to the changelog's last stable offset, and returns
// how many records it applied.
func (r *restorer) restore(tp checkpoint.TP) (int, error) {
	w := r.w
	if w.store == nil {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	topic := broker.ChangelogTopic(w.cfg.group, tp.Topic)
	ends, err := w.admin.Kadm().ListCommittedOffsets(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("listing changelog end: %w", err)
	}
	endOff, ok := ends.Lookup(topic, tp.Partition)
	if !ok || endOff.Err != nil {
		return 0, fmt.Errorf("changelog %s partition %d: end offset unknown: %v", topic, tp.Partition, endOff.Err)
	}
	end := endOff.Offset
	cur, ok, err := w.store.Checkpoint(tp)
	if err != nil {
		return 0, err
	}
	from := int64(0)
	if ok && cur.Changelog > 0 {
		from = cur.Changelog
	}
	if from > end {
		// The changelog is shorter than what the checkpoint saw: it was
		// recreated. Start over from it.
		w.cfg.log.Warn("checkpoint is ahead of its changelog: rebuilding the partition", "topic", tp.Topic, "partition", tp.Partition,
			"checkpoint", from, "changelog_end", end)
		if err := w.store.DropPartition(tp); err != nil {
			return 0, err
		}
		from = 0
	}
	if from >= end {
		return 0, nil
	}
	cl, err := w.cfg.conn.NewClient(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {tp.Partition: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.KeepControlRecords(),
		kgo.FetchMaxBytes(32<<20),
	)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	var (
		entries []checkpoint.Entry
		applied int
		last    = from - 1
	)
	for last < end-1 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return applied, fmt.Errorf("reading changelog %s/%d: %w", topic, tp.Partition, err)
		}
		var decodeErr error
		fs.EachRecord(func(rec *kgo.Record) {
			if rec.Offset >= end || decodeErr != nil {
				return
			}
			last = rec.Offset
			if rec.Attrs.IsControl() {
				return
			}
			e, err := checkpoint.DecodeChangelog(rec.Key, rec.Value)
			if err != nil {
				decodeErr = fmt.Errorf("changelog %s/%d offset %d: %w", topic, tp.Partition, rec.Offset, err)
				return
			}
			e.Offset = rec.Offset
			entries = append(entries, e)
		})
		if decodeErr != nil {
			return applied, decodeErr
		}
		if len(entries) >= restoreChunk || (last >= end-1 && len(entries) > 0) {
			next := entries[len(entries)-1].Offset + 1
			if last >= end-1 {
				next = end
			}
			if err := w.store.Apply(tp, entries, next); err != nil {
				return applied, err
			}
			applied += len(entries)
			entries = entries[:0]
		}
	}
	if applied == 0 {
		// Only control records or nothing: record how far we read.
		if err := w.store.Apply(tp, nil, end); err != nil {
			return 0, err
		}
	}
	return applied, nil
}
