package consumer

import (
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
)

// heldLines holds fetched tasks of lane queues outside the slots, in a
// line per lane queue, in the order they came. A lane queue shares its
// lane's partitions with the lane's other queues, so what keeps its tasks
// from starting cannot stop the fetch: they wait here, taking no slot,
// while the lane's other queues go on. They keep their keys, so what
// follows them in key order waits too: the later tasks of their own queue
// with the same key, nothing of another queue (orderKey). The scheduler
// keeps two:
//   - paused: the tasks of paused lane queues, until they are resumed
//     (setPaused). A task that started before the pause waits in its slot
//     (waitUnpaused), as every task of a paused queue of its own topic
//     does;
//   - unwanted: OnDemand, the tasks of lane queues nobody wants, up to
//     OnDemandLine of each, until Want (demand.go).
type heldLines struct {
	mu      sync.Mutex
	lines   map[string][]*item // by lane queue
	waiting atomic.Int64       // tasks in the lines, for the metrics
}

// hold moves the items of the lane queues that held says to hold into
// their lines and returns the others; items is hold's to reuse. held is
// asked under the lines' lock, with the length of the queue's line, so
// that a release made after held changed its answer takes every item it
// held.
func (h *heldLines) hold(w *Worker, items []*item, held func(queue string, line int) bool) []*item {
	out := items[:0]
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, it := range items {
		if w.queues.lanes[it.rec.Topic] {
			if q, ok := laneQueueOf(it.rec); ok && held(q, len(h.lines[q])) {
				if h.lines == nil {
					h.lines = map[string][]*item{}
				}
				h.lines[q] = append(h.lines[q], it)
				h.waiting.Add(1)
				continue
			}
		}
		out = append(out, it)
	}
	return out
}

// release takes the line of queue out: its records, in the order they
// came. Its caller made held's answer for queue false first.
func (h *heldLines) release(queue string) []*item {
	h.mu.Lock()
	defer h.mu.Unlock()
	line := h.lines[queue]
	delete(h.lines, queue)
	h.waiting.Add(-int64(len(line)))
	return line
}

// drop takes a revoked partition's records out of the lines and returns
// how many it took: they never started.
func (h *heldLines) drop(ps *partState) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for q, line := range h.lines {
		kept := line[:0]
		for _, it := range line {
			if it.ps != ps {
				kept = append(kept, it)
			}
		}
		n += len(line) - len(kept)
		clear(line[len(kept):])
		if len(kept) == 0 {
			delete(h.lines, q)
		} else {
			h.lines[q] = kept
		}
	}
	h.waiting.Add(-int64(n))
	return n
}

// holdPaused holds the items of paused lane queues (heldLines).
func (s *scheduler) holdPaused(items []*item) []*item {
	w := s.w
	if w.control == nil || len(w.queues.lanes) == 0 || !w.control.AnyPaused() {
		return items // a task paused after this waits in its slot
	}
	return s.paused.hold(w, items, func(q string, _ int) bool { return w.control.Paused(q) })
}

// holdUnwanted holds, OnDemand, the items of lane queues nobody wants, up
// to OnDemandLine of each and half of MaxBufferedRecords in all (so that
// they never stop the fetch); past that, they start as they come.
func (s *scheduler) holdUnwanted(items []*item) []*item {
	w := s.w
	if !w.cfg.onDemand || w.cfg.onDemandLine == 0 || len(w.queues.lanes) == 0 {
		return items
	}
	most := int64(w.cfg.maxBuffered / 2)
	return s.unwanted.hold(w, items, func(q string, line int) bool {
		return line < w.cfg.onDemandLine && s.unwanted.waiting.Load() < most && !w.wanted(q)
	})
}

// orderKey is the key that orders a record among the records of its
// partition (setKeys, and the lookahead's passed-over keys): its key or,
// for a lane queue's record, its key within its queue (onceq.LaneKey), so
// that a task of a lane queue waits behind no task of another, whatever
// keys their writers chose; "" for a record without a key.
func orderKey(r *kgo.Record) string {
	if len(r.Key) == 0 {
		return ""
	}
	if q, ok := laneQueueOf(r); ok {
		return onceq.LaneKey(q, r.Key)
	}
	return string(r.Key)
}

// laneQueueOf is the lane queue a record's onceq-queue header names, if it
// names one.
func laneQueueOf(r *kgo.Record) (string, bool) {
	q, found, err := onceq.PeekQueue(r)
	if !found || err != nil {
		return "", false
	}
	_, _, ok := onceq.SplitLane(q)
	return q, ok
}
