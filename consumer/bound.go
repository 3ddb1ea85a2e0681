package consumer

import (
	"container/heap"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// queueBound holds the tasks of a queue past MaxRunningPerQueue. A record
// that its keys let start (scheduler.start) takes one of its queue's max
// places, or waits in its queue's line, outside the slots; a record that
// finishes gives its place to the first in its queue's line. Records in
// the line keep their keys, so what waits behind them in key order still
// waits, and no two of them share a key: they may start in any order.
// They start in the queue's order (lineOrder): the highest priority
// first, then the oldest, whichever partition each comes from and
// whenever it was fetched, so that a queue spread over partitions (a
// lane queue, or a topic of several) hands its places out first come,
// first served. Each step is O(log n) of the queue's line.
//
// A place is held from start to finish: in the ready channel, in a slot,
// and while its result is recorded. A record abandoned by the watchdog
// gives its place up when the watchdog takes its slot over, though its
// handler may still be running, and so does one whose handler yields it
// (Task.YieldQueuePlace).
type queueBound struct {
	max     int
	mu      sync.Mutex
	queues  map[string]*queueLine
	waiting atomic.Int64 // records in the lines, for the metrics
}

// queueLine is one queue's places taken and its records waiting for one,
// in lineOrder.
type queueLine struct {
	running int
	line    lineHeap
}

// lineOrder orders the records of a queue's line: the highest priority
// first, then by their records' timestamps (when each was produced:
// published, retried, or moved on by the delay service once due, to the
// millisecond), then, of two without idempotency keys, by their dedup
// keys, which start with their IDs: two first attempts of IDs onceq
// generated so go in the order their producer submitted them
// (onceq.CompareSubmissions), and two retries of one millisecond, whose
// order tells nothing either way, in their IDs' order; then by partition
// and offset.
func lineOrder(a, b *item) int {
	switch {
	case a.prio != b.prio:
		return int(b.prio) - int(a.prio)
	case !a.rec.Timestamp.Equal(b.rec.Timestamp):
		return a.rec.Timestamp.Compare(b.rec.Timestamp)
	case !a.idem && !b.idem && a.dedupKey != b.dedupKey:
		return strings.Compare(a.dedupKey, b.dedupKey)
	case a.rec.Partition != b.rec.Partition:
		return int(a.rec.Partition - b.rec.Partition)
	case a.rec.Offset < b.rec.Offset:
		return -1
	case a.rec.Offset > b.rec.Offset:
		return 1
	}
	return 0
}

// lineHeap is a queue's line, a heap in lineOrder.
type lineHeap []*item

func (h lineHeap) Len() int           { return len(h) }
func (h lineHeap) Less(i, j int) bool { return lineOrder(h[i], h[j]) < 0 }
func (h lineHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *lineHeap) Push(x any)        { *h = append(*h, x.(*item)) }
func (h *lineHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}

func newQueueBound(n int) *queueBound {
	return &queueBound{max: n, queues: map[string]*queueLine{}}
}

// boundKey is the queue whose places r takes: its lane queue, if it names
// one, else its topic's queue.
func boundKey(r *kgo.Record) string {
	if q, ok := laneQueueOf(r); ok {
		return q
	}
	return r.Topic
}

// take returns the records of items that may start now, each holding a
// place of its queue; it puts the others in their queues' lines. Of
// items, the first in lineOrder take the places.
func (b *queueBound) take(items []*item) []*item {
	if len(items) > 1 {
		slices.SortFunc(items, lineOrder)
	}
	out := items[:0] // items is the caller's to give
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, it := range items {
		k := boundKey(it.rec)
		q := b.queues[k]
		if q == nil {
			q = &queueLine{}
			b.queues[k] = q
		}
		if q.running < b.max {
			q.running++
			out = append(out, it)
			continue
		}
		heap.Push(&q.line, it)
		b.waiting.Add(1)
	}
	return out
}

// done gives the place of a finished record (or one whose handler yields
// it) to the first record in its queue's line, and returns that one (nil
// if none waits). A record gives its place once.
func (b *queueBound) done(it *item) *item {
	b.mu.Lock()
	defer b.mu.Unlock()
	if it.placeGiven {
		return nil // given up already, by its handler
	}
	it.placeGiven = true
	k := boundKey(it.rec)
	q := b.queues[k]
	if q == nil {
		return nil
	}
	if len(q.line) > 0 {
		b.waiting.Add(-1)
		return heap.Pop(&q.line).(*item) // it takes the place over
	}
	if q.running--; q.running <= 0 {
		delete(b.queues, k)
	}
	return nil
}

// drop takes a revoked partition's records out of their queues' lines
// and returns how many it took: they never started. A partition of a
// lane holds records of many queues.
func (b *queueBound) drop(ps *partState) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var n int
	for k, q := range b.queues {
		kept := q.line[:0]
		for _, it := range q.line {
			if it.ps != ps {
				kept = append(kept, it)
			}
		}
		if d := len(q.line) - len(kept); d > 0 {
			clear(q.line[len(kept):])
			q.line = kept
			heap.Init(&q.line)
			n += d
		}
		if q.running <= 0 && len(q.line) == 0 {
			delete(b.queues, k)
		}
	}
	b.waiting.Add(-int64(n))
	return n
}
