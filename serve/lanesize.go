package serve

import (
	"context"
	"sort"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
)

// The size of a lane queue. A lane's backlog (the records past the pull
// group's committed offsets) holds every one of its queues' tasks, and
// starts at the oldest unfinished record of each partition: one job of a
// queue nobody consumes keeps every later record of its partition in it,
// so it grows with the whole lane's traffic, finished tasks and all, and
// one queue's jobs are scattered through it. Counting them means reading
// all of it; a share of a sample, scaled, says 0 or 7 for a queue of one
// job.
//
// So each server keeps what it read of its lane's backlog (laneBacklog):
// for each partition, how far it read, and the records read that had not
// ended then (stateOf), by queue and ID. A size reads only the records
// appended since the last one, forgets those the committed offsets
// passed, and counts its queue's that wait; a record found ended is
// forgotten. What it keeps is one entry per task not ended, of any of
// the lane's queues, up to maxLaneIndex.

// maxLaneIndex bounds the records a server keeps of its lane's backlog,
// about 100 bytes each: past it, a size reads the records it could not
// keep again each time, and counts its queue's there too.
var maxLaneIndex = 1 << 20

// laneBacklog is what a server read of its lane's backlog.
type laneBacklog struct {
	mu     sync.Mutex // held through a size: one reads the lane at a time
	parts  map[int32]*laneSpan
	kept   int               // the records of every part
	queues map[string]string // the queues' names, kept once
}

// laneSpan is what was read of one partition of the lane.
type laneSpan struct {
	from, next int64     // the offsets read: [from, next)
	recs       []laneRec // those not ended when read, in offset order
}

// laneRec is a record of the lane's backlog that had not ended.
type laneRec struct {
	offset    int64
	queue, id string
}

// laneSize counts the tasks of lane queue queue that wait in its lane's
// backlog.
func (s *Server) laneSize(ctx context.Context, queue string) (int64, error) {
	ranges, _, err := s.backlogRanges(ctx, queue)
	if err != nil {
		return 0, err
	}
	lb := &s.laneBacklog
	lb.mu.Lock()
	defer lb.mu.Unlock()
	n, err := s.readLane(ctx, queue, lb.advance(ranges))
	if err != nil {
		return 0, err // what was read is kept: the next size goes on from there
	}
	for p, sp := range lb.parts {
		kept := sp.recs[:0]
		for _, r := range sp.recs {
			if r.queue == queue {
				switch s.stateOf(ctx, queue, r.id, p, r.offset) {
				case ended:
					continue
				case waiting:
					n++
				}
			}
			kept = append(kept, r)
		}
		lb.kept -= len(sp.recs) - len(kept)
		clear(sp.recs[len(kept):])
		sp.recs = kept
	}
	return n, nil
}

// advance fits what lb holds to the backlog's ranges, and returns what is
// left to read of each partition: from where it was read up to, to its
// range's end. The records below a range's start are no more in the
// backlog; a partition that has no range, or whose range starts before
// or after what was read or ends before it (its group's offsets were
// reset, or the lane made anew), is forgotten and read again.
func (lb *laneBacklog) advance(ranges map[int32]backlogRange) map[int32]backlogRange {
	if lb.parts == nil {
		lb.parts, lb.queues = map[int32]*laneSpan{}, map[string]string{}
	}
	for p, sp := range lb.parts {
		if r, ok := ranges[p]; !ok || r.from < sp.from || r.from > sp.next || r.end < sp.next {
			lb.kept -= len(sp.recs)
			delete(lb.parts, p)
		}
	}
	read := map[int32]backlogRange{}
	for p, r := range ranges {
		sp := lb.parts[p]
		if sp == nil {
			sp = &laneSpan{from: r.from, next: r.from}
			lb.parts[p] = sp
		}
		gone := sort.Search(len(sp.recs), func(i int) bool { return sp.recs[i].offset >= r.from })
		clear(sp.recs[:gone])
		sp.recs, sp.from = sp.recs[gone:], r.from
		lb.kept -= gone
		if sp.next < r.end {
			read[p] = backlogRange{sp.next, r.end}
		}
	}
	if lb.kept == 0 {
		clear(lb.queues)
	}
	return read
}

// readLane reads the records of the lane of queue in read into what the
// server keeps of it (s.laneBacklog, locked), but those ended already.
// Past maxLaneIndex records kept, it keeps no more: each partition's
// next record to read stays where it stopped, and n counts queue's
// waiting tasks among those it did not keep.
func (s *Server) readLane(ctx context.Context, queue string, read map[int32]backlogRange) (n int64, err error) {
	if len(read) == 0 {
		return 0, nil
	}
	lb := &s.laneBacklog
	full := map[int32]bool{} // the partitions read past what is kept
	err = s.readRange(ctx, onceq.QueueTopic(queue), read, func(rec *kgo.Record) (bool, error) {
		sp := lb.parts[rec.Partition]
		var t onceq.Task
		st := ended
		if !rec.Attrs.IsControl() {
			var err error
			if t, err = onceq.FromRecord(rec); err == nil {
				st = s.stateOf(ctx, t.Queue, t.ID, rec.Partition, rec.Offset)
			}
		}
		if full[rec.Partition] || st != ended && lb.kept >= maxLaneIndex {
			full[rec.Partition] = true
			if st == waiting && t.Queue == queue {
				n++
			}
			return false, nil
		}
		if st != ended {
			q, ok := lb.queues[t.Queue]
			if !ok {
				q = t.Queue
				lb.queues[q] = q
			}
			sp.recs = append(sp.recs, laneRec{offset: rec.Offset, queue: q, id: t.ID})
			lb.kept++
		}
		sp.next = rec.Offset + 1
		return false, nil
	})
	return n, err
}
