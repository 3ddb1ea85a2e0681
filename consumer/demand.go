package consumer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onceq/onceq"
)

// Fetching on demand (OnDemand). A worker over every queue of a server,
// whose handler hands each task to a client that asked for its queue
// (onceq serve's HTTP consumers), fetches a queue's partitions only while
// some client wants the queue: Want says so, until a time, and each call
// is cheap enough to make on every request. The first Want of a queue
// not wanted resumes fetching its partitions at once; the wants that
// lapsed are found every demandTick and their queues stop being fetched
// together, in one call to the client (see refetch). What was fetched
// still runs. While no queue is wanted, nothing ticks: an idle server
// wakes for nothing.
//
// A partition is fetched when it is not quiet and its queue is wanted;
// a control pause stops its topic apart from that (setPaused). The quiet
// bookkeeping (quiet.go) goes on whether the queue is wanted or not: a
// wake-up of a queue nobody wants makes its partitions not quiet, so that
// they are fetched as soon as it is wanted, but not fetched before.

// demandTick is how often the worker looks for wants that lapsed: a
// queue is fetched up to this long after its want's end.
const demandTick = 50 * time.Millisecond

// demand is the queues wanted now: a queue is in wants from its first Want
// to its want's end. An entry's until is raised under mu read-locked and
// read under mu locked, so an entry never leaves wants while a Want
// extends it.
type demand struct {
	mu    sync.RWMutex
	wants map[string]*atomic.Int64 // until, in unix nanoseconds
	made  chan struct{}            // told when wants gains an entry; buffered 1
}

// Want says that queue is wanted until until: while the worker runs
// OnDemand, it fetches the queue's partitions it owns until then. A later
// call extends the want; one with an earlier until leaves it as it is.
// Partitions of queue assigned to the worker while the want lasts are
// fetched from their assignment. A lane queue's want fetches its lane and
// starts the tasks of it that waited for one (OnDemandLine). Want is safe
// for concurrent use and cheap while the queue is wanted: no allocation,
// no call to the brokers. It does nothing for a queue the worker does not
// consume, or without OnDemand.
func (w *Worker) Want(queue string, until time.Time) {
	if !w.cfg.onDemand {
		return
	}
	made := w.want(queue, until, func() bool { return w.queues.has(queue) })
	lane, _, isLane := onceq.SplitLane(queue)
	if !isLane || !made && !w.wanted(queue) {
		return
	}
	// The lane's want lasts as long as its queues': every Want of one
	// raises it.
	w.want(lane, until, func() bool { return w.queues.lanes[lane] })
	if !made {
		return
	}
	if held := w.sched.unwanted.release(queue); len(held) > 0 {
		go w.sched.start(held) // not on the caller's goroutine
	}
}

// want raises name's want to until, making it (if known says the worker
// consumes name) when there is none: then its partitions, if it is a
// topic, are fetched again. It reports whether it made the want. A lane's
// want lasts as long as its lane queues' longest.
func (w *Worker) want(name string, until time.Time, known func() bool) (made bool) {
	u := until.UnixNano()
	d := &w.demand
	d.mu.RLock()
	e := d.wants[name]
	if e != nil {
		raise(e, u)
	}
	d.mu.RUnlock()
	if e != nil || !until.After(time.Now()) || !known() {
		return false
	}
	d.mu.Lock()
	e = d.wants[name]
	fresh := e == nil
	if fresh {
		e = new(atomic.Int64)
		d.wants[name] = e
	}
	raise(e, u)
	n := len(d.wants)
	d.mu.Unlock()
	if !fresh {
		return false
	}
	select {
	case d.made <- struct{}{}:
	default:
	}
	w.mu.Lock()
	parts := w.byQueue[name]
	w.mu.Unlock()
	w.refetch(parts...)
	w.metrics.wanted.Set(float64(n))
	return true
}

// raise sets e to u if u is later.
func raise(e *atomic.Int64, u int64) {
	for {
		old := e.Load()
		if u <= old || e.CompareAndSwap(old, u) {
			return
		}
	}
}

// wanted says whether the worker fetches queue's partitions as far as the
// demand for them goes: always, without OnDemand.
func (w *Worker) wanted(queue string) bool {
	if !w.cfg.onDemand {
		return true
	}
	w.demand.mu.RLock()
	defer w.demand.mu.RUnlock()
	return w.demand.wants[queue] != nil
}

// Owns says whether the worker owns at least one partition of queue (of
// its lane, for a lane queue) now: whether a task of queue may run here. It is as cheap as a map lookup.
func (w *Worker) Owns(queue string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byQueue[onceq.QueueTopic(queue)]) > 0
}

// Rejoin has the worker's group member join its group again now, when
// its user knows that the group rebalances: another member was removed
// from it (broker.Admin.RemoveMember). A member learns of a rebalance at
// its next heartbeat, up to 3 s on, and the group hands the removed
// member's partitions over only once every member rejoined. With
// ConsumerGroup it sends a heartbeat now instead. Before Run and after it
// returned, it does nothing.
func (w *Worker) Rejoin() {
	w.fetchMu.Lock() // w.kafka is replaced under it
	defer w.fetchMu.Unlock()
	if w.kafka != nil {
		w.kafka.rejoin()
	}
}

// demandLoop ends, every demandTick until ctx ends, the wants that lapsed;
// while there is none, it waits for the next one without ticking.
func (w *Worker) demandLoop(ctx context.Context) {
	t := time.NewTicker(demandTick)
	defer t.Stop()
	for {
		if w.demand.none() {
			t.Stop()
			select {
			case <-ctx.Done():
				return
			case <-w.demand.made:
			}
			t.Reset(demandTick)
		}
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			w.lapse(now)
		}
	}
}

// none says whether no queue is wanted.
func (d *demand) none() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.wants) == 0
}

// lapse removes the wants that ended by now and stops fetching their
// queues, in one refetch.
func (w *Worker) lapse(now time.Time) {
	d := &w.demand
	at := now.UnixNano()
	ended := false
	d.mu.RLock()
	for _, e := range d.wants {
		if e.Load() <= at {
			ended = true
			break
		}
	}
	d.mu.RUnlock()
	if !ended {
		return
	}
	var lapsed []string
	d.mu.Lock()
	for q, e := range d.wants {
		if e.Load() <= at {
			delete(d.wants, q)
			lapsed = append(lapsed, q)
		}
	}
	n := len(d.wants)
	d.mu.Unlock()
	var parts []*partState
	w.mu.Lock()
	for _, q := range lapsed {
		parts = append(parts, w.byQueue[q]...)
	}
	w.mu.Unlock()
	w.refetch(parts...)
	w.metrics.wanted.Set(float64(n)) // after: no fetch of the lapsed queues begins past it
}
