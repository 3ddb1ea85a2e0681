package consumer

import (
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// queueBound holds the tasks of a queue past MaxRunningPerQueue. A record
// that its keys let start (scheduler.start) takes one of its queue's max
// places, or waits in its queue's line, outside the slots; a record that
// finishes gives its place to the first in its queue's line. Records in
// the line keep their keys, so what waits behind them in key order still
// waits, and they start in the order they came. Each step is O(1).
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

// queueLine is one queue's places taken and its records waiting for one.
type queueLine struct {
	running int
	line    []*item
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
// place of its queue; it puts the others in their queues' lines.
func (b *queueBound) take(items []*item) []*item {
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
		q.line = append(q.line, it)
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
		next := q.line[0]
		q.line[0] = nil
		q.line = q.line[1:]
		b.waiting.Add(-1)
		return next // it takes the place over
	}
	if q.running--; q.running <= 0 {
		delete(b.queues, k)
	}
	return nil
}

// drop takes a revoked partition's records out of their queue's line and
// returns how many it took: they never started.
func (b *queueBound) drop(ps *partState) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[ps.tp.Topic]
	if q == nil || len(q.line) == 0 {
		return 0
	}
	kept := q.line[:0]
	for _, it := range q.line {
		if it.ps != ps {
			kept = append(kept, it)
		}
	}
	n := len(q.line) - len(kept)
	clear(q.line[len(kept):])
	q.line = kept
	b.waiting.Add(-int64(n))
	if q.running <= 0 && len(q.line) == 0 {
		delete(b.queues, ps.tp.Topic)
	}
	return n
}
