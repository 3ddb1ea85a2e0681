// Package checkpoint is a worker's memory of what it has done: per Kafka
// partition, the offsets it has processed up to, the IDs of the tasks it has
// processed (for the dedup window) and the tasks' state. It is a Pebble store
// in a local directory, written in atomic, synced batches, and restorable
// from a compacted changelog topic.
//
// # Opening
//
// A store belongs to one consumer group of one Kafka cluster. Open records
// both on first use and refuses a directory of another cluster or group, one
// held by another process, or one that is not a checkpoint store:
//
//	s, err := checkpoint.Open("/var/lib/onceq/billing",
//		checkpoint.ClusterID(clusterID), // from the broker's metadata
//		checkpoint.Group("billing"),
//	)
//	if errors.Is(err, checkpoint.ErrInUse) { ... } // also ErrMismatch, ErrCorrupt, ErrVersion
//	defer s.Close()
//
// The other options (DedupWindow, NoSync, CacheSize, MemTableSize, ReadOnly,
// FS, Logger) each document their default: a 7-day dedup window, synced
// commits, and 96 MiB of memory for memtables (32 MiB each) and cached
// blocks. Open checks the options before it touches the directory and
// refuses them with ErrInvalid, naming every wrong one at once; each is an
// *onceq.OptionError, listed by onceq.Options:
//
//	_, err := checkpoint.Open(dir, checkpoint.CacheSize(1000), checkpoint.DedupWindow(0))
//	for _, oe := range onceq.Options(err) {
//		fmt.Println(oe) // checkpoint: ClusterID: none: ..., checkpoint: DedupWindow 0s: want 1s or more, ...
//	}
//
// # The commit cycle
//
// After its Kafka transaction commits, the worker writes what the
// transaction made durable in one batch, for all its partitions at once:
//
//	marks := checkpoint.MarkRecords(idempotencyKeys) // []checkpoint.Mark: IDs and times
//	b := s.NewBatch()
//	defer b.Close()
//	for _, e := range marks {
//		b.MarkRecord(tp, e.Marks) // the records the changelog got
//	}
//	b.Set(tp, []byte("balance/alice"), []byte("42")) // task state
//	b.SetOffsets(tp, checkpoint.Offsets{Source: next, Changelog: changelogNext,
//		Finished: finished}) // records finished above next, as offset ranges
//	err := b.Commit() // atomic across partitions; synced unless NoSync
//
// Only idempotency keys, IDs a client chose, are marked: the other records
// reach their queue once, and need remembering only while they sit above
// the committed offset, which Offsets.Finished does in a few ranges.
//
// A crash leaves either all of a committed batch or none of it. Before
// running a record, the worker asks whether its task ID was processed:
//
//	done, err := s.HasMany(tp, ids) // one fetch's IDs; Has for a single one
//	v, ok, err := s.Get(tp, []byte("balance/alice"))
//	o, ok, err := s.Checkpoint(tp)
//
// # The changelog
//
// Kafka is the source of truth. In the same transaction as its outputs the
// worker writes changelog records, encoded by Entry.Encode (the mark
// records of MarkRecords, one per partition and commit unless its IDs span
// more than a second or 4,096 IDs), EncodeState, EncodeFinished and the
// tombstone encoders, to a compacted topic with one partition per source
// partition. A worker that takes over a partition, or that crashed between
// its transaction and its batch, replays the changelog from the recorded
// offset:
//
//	o, ok, _ := s.Checkpoint(tp) // o.Changelog: where to start (0 if !ok)
//	for each fetch of changelog records {
//		for each record r {
//			e, err := checkpoint.DecodeChangelog(r.Key, r.Value)
//			e.Offset = r.Offset
//			entries = append(entries, e)
//		}
//		err := s.Apply(tp, entries, fetchedUpTo) // idempotent: replays are safe
//	}
//
// A partition that leaves the worker for good is removed with DropPartition.
//
// # The dedup window
//
// The worker runs Expire on a goroutine of its own, beside its commits. It
// removes the IDs processed longer ago than the window and hands over
// their changelog tombstones (Removed.Tombstone: one per mark record, one
// per ID marked by MarkProcessed or restored from a version 1 KindMark
// record) before it deletes them; the next commit writes them first, so
// that the compacted changelog forgets the IDs too:
//
//	n, err := s.Expire(ctx, time.Now(), 100_000, func(rs []checkpoint.Removed) {
//		queue(rs) // for the next commit, ahead of its records
//	})
//
// It works in chunks, resting between them, and never blocks commits.
// ExpireProcessed returns the tombstones instead, for a caller that runs
// it between its commits.
//
// # Layout and tuning
//
// keys.go describes the key layout and why IDs are expired through
// per-commit records rather than a per-ID time index. Pebble runs with bloom
// filters on every level (most lookups are of new IDs, which the filters
// rule out), zstd compression at the bottom levels, and at most two
// concurrent compactions.
package checkpoint
