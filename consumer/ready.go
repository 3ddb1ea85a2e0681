package consumer

import (
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
)

// readyQueue holds the records that may start now, for the slots: the
// highest priority first (onceq-priority), in arrival order within one.
// A record is here only once no earlier record of its key is unfinished
// (scheduler.submit), so the order of a key's records never depends on
// their priorities.
type readyQueue struct {
	mu     sync.Mutex
	levels [onceq.MaxPriority + 1]fifo
	// avail holds a token for each record pushed: a slot takes a token,
	// then a record. A record is added before its token, so a slot with a
	// token always finds one.
	avail chan struct{}
	// n counts the records queued (guarded by mu). With counting, idle
	// counts the slots waiting for a token (their own count before pop,
	// pop's once it has one, before it takes a record under mu): a push
	// that finds more records queued than slots idle, or a pop that leaves
	// them, sees a slot is wanted (scheduler.grow), whatever their order.
	n        int
	counting bool
	idle     atomic.Int64
}

func newReadyQueue(capacity int, counting bool) *readyQueue {
	return &readyQueue{avail: make(chan struct{}, capacity), counting: counting}
}

// push adds it and returns how many records are queued with it; it waits
// while the queue holds its capacity, until quit is closed.
func (q *readyQueue) push(it *item, quit <-chan struct{}) int {
	q.mu.Lock()
	q.levels[it.prio].push(it)
	q.n++
	n := q.n
	q.mu.Unlock()
	select {
	case q.avail <- struct{}{}:
	case <-quit:
	}
	return n
}

// pop takes the next record, waiting for one, and returns how many
// records are left; nil once quit is closed.
func (q *readyQueue) pop(quit <-chan struct{}) (*item, int) {
	select {
	case <-q.avail:
	case <-quit:
		return nil, 0
	}
	if q.counting {
		q.idle.Add(-1)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for p := len(q.levels) - 1; p >= 0; p-- {
		if it := q.levels[p].pop(); it != nil {
			q.n--
			return it, q.n
		}
	}
	return nil, q.n // unreachable: a token stands for a record
}

// wanted reports whether n records queued want another slot.
func (q *readyQueue) wanted(n int) bool { return int64(n) > q.idle.Load() }

// waiting is how many records of priority p wait for a slot.
func (q *readyQueue) waiting(p int) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return int64(q.levels[p].len())
}

// fifo is a queue of records that reuses its array.
type fifo struct {
	items []*item
	head  int
}

func (f *fifo) push(it *item) {
	if f.head > 0 && f.head == len(f.items) {
		f.items, f.head = f.items[:0], 0
	} else if f.head > 1024 && f.head > len(f.items)/2 {
		n := copy(f.items, f.items[f.head:])
		clear(f.items[n:])
		f.items, f.head = f.items[:n], 0
	}
	f.items = append(f.items, it)
}

func (f *fifo) len() int { return len(f.items) - f.head }

func (f *fifo) pop() *item {
	if f.head == len(f.items) {
		return nil
	}
	it := f.items[f.head]
	f.items[f.head] = nil
	f.head++
	return it
}

// recordPriority is a record's onceq-priority (onceq.PeekPriority).
func recordPriority(r *kgo.Record) int8 { return int8(onceq.PeekPriority(r)) }
