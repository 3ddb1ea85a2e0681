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

// replayChangelog replays the changelog partition of tp from the offset the
// checkpoint recorded up to a fence it writes at the partition's end, and
// returns how many records it applied.
//
// Why a fence and not the last stable offset: a broker that restarts after
// a crash may abort open transactions without writing their markers (the
// embedded broker does), so the last stable offset can lie past records no
// read_committed reader ever receives, and waiting for it would never end.
// The fence is a plain record: once it is read, every transaction before
// it is settled and read.
func (w *Worker) replayChangelog(tp checkpoint.TP) (int, error) {
	if w.store == nil {
		return 0, nil
	}
	// A checkpoint write in flight may be for this partition, from when
	// the worker last owned it: let it land first.
	_ = w.ckpt.wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	topic := broker.ChangelogTopic(w.cfg.group, tp.Topic)
	fence, err := w.writeFence(ctx, topic, tp.Partition)
	if err != nil {
		return 0, err
	}
	end := fence + 1
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
	var (
		entries []checkpoint.Entry
		applied int
		fnErr   error // an error of the callback, returned as it is
	)
	apply := func(next int64) error {
		if err := w.store.Apply(tp, entries, next); err != nil {
			return err
		}
		applied += len(entries)
		entries = entries[:0]
		return nil
	}
	err = broker.ReadPartitions(ctx, w.cfg.conn, topic, map[int32]int64{tp.Partition: from}, func(rec *kgo.Record) (bool, error) {
		if rec.Offset >= fence {
			return true, nil
		}
		e, err := checkpoint.DecodeChangelog(rec.Key, rec.Value)
		if err != nil {
			fnErr = fmt.Errorf("changelog %s/%d offset %d: %w", topic, tp.Partition, rec.Offset, err)
			return true, fnErr
		}
		e.Offset = rec.Offset
		entries = append(entries, e)
		if len(entries) >= restoreChunk {
			fnErr = apply(rec.Offset + 1)
		}
		return false, fnErr
	}, kgo.FetchMaxBytes(32<<20))
	if fnErr != nil {
		return applied, fnErr
	}
	if err != nil {
		return applied, fmt.Errorf("reading changelog %s/%d: %w", topic, tp.Partition, err)
	}
	return applied, apply(end)
}

// writeFence appends a fence record to a changelog partition and returns
// its offset.
func (w *Worker) writeFence(ctx context.Context, topic string, partition int32) (int64, error) {
	offs, err := broker.WriteFences(ctx, w.cfg.conn, topic, []int32{partition}, func(int32) *kgo.Record {
		k, v := checkpoint.EncodeFence()
		return &kgo.Record{Key: k, Value: v}
	})
	if err != nil {
		return 0, fmt.Errorf("writing the changelog fence of %s/%d: %w", topic, partition, err)
	}
	return offs[partition], nil
}
