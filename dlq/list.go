package dlq

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
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
// with no queue, of every queue that has a dead letter or a dead-letter
// topic of its own, sorted: each dead-letter topic is read once, its
// letters counted for the queue each names (a lane's topic holds its lane
// queues' letters).
func (r *Reader) QueueStats(ctx context.Context, queues ...string) ([]QueueStats, error) {
	all := len(queues) == 0
	if all {
		var err error
		if queues, err = r.Queues(ctx); err != nil {
			return nil, err
		}
	}
	empty, err := r.empty(ctx, queues)
	if err != nil {
		return nil, err
	}
	var floors map[string]map[int32]int64
	if all {
		if floors, err = readFloors(ctx, r.conn, onceq.IsLaneQueue); err != nil {
			return nil, err
		}
	}
	var stats []QueueStats
	for _, q := range queues {
		s := QueueStats{Queue: q}
		if empty[q] {
			stats = append(stats, s)
			continue
		}
		if !all {
			if err := r.Read(ctx, q, func(l Letter) error { s.Add(l); return nil }); err != nil {
				return nil, err
			}
			stats = append(stats, s)
			continue
		}
		byQueue := map[string]*QueueStats{q: &s}
		if err := r.readTopic(ctx, q, func(l Letter) error {
			// As Read counts it: a letter is q's, or a lane queue's of q's
			// when it names one; one that names another lane's is no one's.
			name := q
			if lane, _, ok := onceq.SplitLane(l.Task.Queue); ok && lane == q {
				name = l.Task.Queue
			} else if ok {
				return nil
			}
			if below(floors, &l) {
				return nil // removed
			}
			qs := byQueue[name]
			if qs == nil {
				qs = &QueueStats{Queue: name}
				byQueue[name] = qs
			}
			qs.Add(l)
			return nil
		}); err != nil {
			return nil, err
		}
		for _, name := range slices.Sorted(maps.Keys(byQueue)) {
			stats = append(stats, *byQueue[name])
		}
	}
	return stats, nil
}

// empty returns those of queues whose dead-letter topic exists and never
// held a record, in one metadata and one ListOffsets request for all of
// them: most queues of a deployment of thousands have no dead letter,
// and need no reader each.
func (r *Reader) empty(ctx context.Context, queues []string) (map[string]bool, error) {
	topics := make([]string, len(queues))
	for i, q := range queues {
		topics[i] = broker.DLQTopic(q)
	}
	counts, err := r.adm.PartitionCounts(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("dlq: %w", err)
	}
	parts := map[string][]int32{}
	for t, n := range counts {
		for p := range n {
			parts[t] = append(parts[t], p)
		}
	}
	ends, err := r.adm.StableOffsets(ctx, parts)
	if err != nil {
		return nil, fmt.Errorf("dlq: %w", err)
	}
	out := map[string]bool{}
	for i, q := range queues {
		t := topics[i]
		if counts[t] == 0 || len(ends[t]) != int(counts[t]) {
			continue // read, to say why
		}
		if !slices.ContainsFunc(slices.Collect(maps.Values(ends[t])), func(o int64) bool { return o > 0 }) {
			out[q] = true
		}
	}
	return out, nil
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
