package pull

import (
	"container/heap"
	"sync"

	"github.com/onceq/onceq"
)

// offers is a queue's hand-out order: the tasks its handlers offer to
// the server's consumers, the highest priority first (docs/operations.md,
// "Priority": strict within a queue) and, within one priority, first come
// first served: in the order they became ready to run (published, or due
// for a delayed task and a retry), then in their partition's order, the
// order the worker starts them in, whichever order their handlers reach
// the queue in. A consumer takes the first (pop); a handler that stops
// offering its task withdraws it, unless a consumer took it first. It is
// safe for concurrent use.
type offers struct {
	mu    sync.Mutex
	order offerHeap
	// added is closed when a task is offered, and replaced: a consumer
	// that found none waits on it.
	added chan struct{}
}

// put offers l.
func (o *offers) put(l *lease) {
	o.mu.Lock()
	defer o.mu.Unlock()
	heap.Push(&o.order, l)
	if o.added != nil {
		close(o.added)
		o.added = nil
	}
}

// withdraw takes l back and reports whether it did: false if a consumer
// took it first, whose terms then come.
func (o *offers) withdraw(l *lease) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if l.index < 0 {
		return false
	}
	heap.Remove(&o.order, l.index)
	return true
}

// pop takes the first task offered, or returns nil and a channel closed
// when one is.
func (o *offers) pop() (*lease, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.order) > 0 {
		return heap.Pop(&o.order).(*lease), nil
	}
	if o.added == nil {
		o.added = make(chan struct{})
	}
	return nil, o.added
}

// len is how many tasks are offered.
func (o *offers) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.order)
}

// offerHeap orders leases by priority, highest first, then by the time
// their tasks became ready, then, within one millisecond, by their IDs
// (onceq.CompareSubmissions), then by partition and offset. A lease knows
// its index, -1 once out.
type offerHeap []*lease

func (h offerHeap) Len() int { return len(h) }
func (h offerHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	switch {
	case a.priority != b.priority:
		return a.priority > b.priority
	case !a.ready.Equal(b.ready):
		return a.ready.Before(b.ready)
	}
	if c := onceq.CompareSubmissions(&a.task.Task, &b.task.Task); c != 0 {
		return c < 0 // one millisecond, one producer: its order
	}
	switch {
	case a.task.Partition != b.task.Partition:
		return a.task.Partition < b.task.Partition
	}
	return a.task.Offset < b.task.Offset
}
func (h offerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *offerHeap) Push(x any) {
	l := x.(*lease)
	l.index = len(*h)
	*h = append(*h, l)
}
func (h *offerHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.index = -1
	return l
}
