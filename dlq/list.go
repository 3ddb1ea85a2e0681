package dlq

import (
	"context"
	"sort"
	"time"
)

// List returns queue's dead letters in partition and offset order, and how
// many there are in all. With limit > 0 it returns at most limit: the first
// ones of the lowest partitions, keeping no more than limit of each
// partition while it reads (partitions interleave), so a large topic is not
// held in memory.
func (r *Reader) List(ctx context.Context, queue string, limit int) (letters []Letter, total int, err error) {
	perPartition := map[int32]int{}
	err = r.Read(ctx, queue, func(l Letter) error {
		total++
		if limit == 0 || perPartition[l.Partition] < limit {
			perPartition[l.Partition]++
			letters = append(letters, l)
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	sort.SliceStable(letters, func(i, j int) bool { return letters[i].Partition < letters[j].Partition })
	if limit > 0 && len(letters) > limit {
		letters = letters[:limit]
	}
	return letters, total, nil
}

// QueueStats is the Stats of one queue's dead letters.
type QueueStats struct {
	Queue string
	Stats
}

// QueueStats counts the dead letters of each queue, in the order given;
// with no queue, of every queue that has a dead-letter topic (Queues).
func (r *Reader) QueueStats(ctx context.Context, queues ...string) ([]QueueStats, error) {
	if len(queues) == 0 {
		var err error
		if queues, err = r.Queues(ctx); err != nil {
			return nil, err
		}
	}
	var stats []QueueStats
	for _, q := range queues {
		s := QueueStats{Queue: q}
		if err := r.Read(ctx, q, func(l Letter) error { s.Add(l); return nil }); err != nil {
			return nil, err
		}
		stats = append(stats, s)
	}
	return stats, nil
}

// Requeues reads queue's dead letters and chooses which to requeue at now,
// as Choose does: the newest dead letter of each of ids, or of every ID
// when ids is empty. problems are Choose's; err is a failure to read.
func (r *Reader) Requeues(ctx context.Context, queue string, ids []string, resetAttempts bool, now time.Time) (rs []Requeue, problems []error, err error) {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var letters []Letter
	err = r.Read(ctx, queue, func(l Letter) error {
		if len(ids) == 0 || want[l.Task.ID] {
			letters = append(letters, l)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	rs, problems = Choose(queue, letters, ids, resetAttempts, now)
	return rs, problems, nil
}
