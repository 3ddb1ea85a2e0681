package consumer

import (
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
)

// pausedLines holds, outside the slots, the tasks of paused lane queues.
// A lane queue shares its lane's partitions with the lane's other queues,
// so its pause cannot stop the fetch (setPaused): the tasks of it that
// arrive while it is paused wait here until it is resumed, taking no slot,
// while the lane's other queues go on. They keep their keys, so what
// follows them in key order waits too, and they start in the order they
// came. A task that started before the pause waits in its slot
// (waitUnpaused), as every task of a paused queue of its own topic does.
type pausedLines struct {
	mu      sync.Mutex
	lines   map[string][]*item // by lane queue
	waiting atomic.Int64       // tasks in the lines, for the metrics
}

// hold moves the records of items whose lane queue is paused into the
// queue's line and returns the others. items is hold's to reuse.
func (p *pausedLines) hold(w *Worker, items []*item) []*item {
	if w.control == nil || len(w.queues.lanes) == 0 || !w.control.AnyPaused() {
		return items // a task paused after this waits in its slot
	}
	out := items[:0]
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, it := range items {
		if !w.queues.lanes[it.rec.Topic] {
			out = append(out, it)
			continue
		}
		if q, ok := laneQueueOf(it.rec); ok && w.control.Paused(q) {
			if p.lines == nil {
				p.lines = map[string][]*item{}
			}
			p.lines[q] = append(p.lines[q], it)
			p.waiting.Add(1)
			continue
		}
		out = append(out, it)
	}
	return out
}

// release takes the line of queue, resumed, out: its records, in the
// order they came. Its caller made Paused(queue) false first, so no record
// joins the line after it: hold decides under the same lock.
func (p *pausedLines) release(queue string) []*item {
	p.mu.Lock()
	defer p.mu.Unlock()
	line := p.lines[queue]
	delete(p.lines, queue)
	p.waiting.Add(-int64(len(line)))
	return line
}

// drop takes a revoked partition's records out of the lines and returns
// how many it took: they never started.
func (p *pausedLines) drop(ps *partState) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for q, line := range p.lines {
		kept := line[:0]
		for _, it := range line {
			if it.ps != ps {
				kept = append(kept, it)
			}
		}
		n += len(line) - len(kept)
		clear(line[len(kept):])
		if len(kept) == 0 {
			delete(p.lines, q)
		} else {
			p.lines[q] = kept
		}
	}
	p.waiting.Add(-int64(n))
	return n
}

// laneQueueOf is the lane queue a record's onceq-queue header names, if it
// names one.
func laneQueueOf(r *kgo.Record) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == onceq.HeaderQueue {
			q := string(h.Value)
			_, _, ok := onceq.SplitLane(q)
			return q, ok
		}
	}
	return "", false
}
