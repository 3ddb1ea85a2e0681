package consumer

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
)

// item is one admitted record on its way to its result.
type item struct {
	ps  *partState
	rec *kgo.Record

	// dedupKey is the record's dedup key and idem whether it is an
	// idempotency key; known is whether the checkpoint (or the overlay of
	// writes in flight) had it when the record was admitted, looked
	// whether that lookup happened, and lookSeq the partition's result
	// sequence then (see dedup.go).
	dedupKey string
	idem     bool
	known    bool
	looked   bool
	lookSeq  uint64

	// keys are what orders the record (its key, its dedup key and, for a
	// record read ahead, its offset: aheadKey); waits counts the keys
	// held by earlier records of its partition (guarded by ps.mu).
	keys  [3]string
	nkeys int8
	waits int8
	// prio is the record's priority (onceq-priority): of the records
	// that may start, the highest start first (readyQueue).
	prio int8
	// ahead: the lookahead admitted it above its partition's fetch
	// position (lookahead.go).
	ahead bool
	// placeGiven: it gave its place under MaxRunningPerQueue up
	// (guarded by queueBound.mu).
	placeGiven bool
}

// scheduler runs records on a bounded number of slots, in key order: a
// record starts once no earlier record of its partition with the same key
// or the same dedup key is unfinished, and then on the first free slot.
// Records of one key therefore run one at a time in offset order, and
// duplicates of one ID never run at once; a slow record holds its own slot
// and the records queued behind its key, nothing else.
//
// A worker of up to eagerSlots slots starts a goroutine for each at once.
// One of more starts them as records find every started slot busy, so a
// concurrency of tens of thousands (onceq serve's pull worker, whose
// handlers wait for HTTP consumers) costs only the slots it uses.
//
// A watchdog cancels the context of a handler past its time-to-run and,
// after the grace period, abandons it: the run counts as failed and a new
// goroutine takes the slot over, while the old one exits whenever the
// handler returns.
type scheduler struct {
	w     *Worker
	ready *readyQueue
	slots []*slot
	wg    sync.WaitGroup
	quit  chan struct{}
	// lazy: slots start as records need them (more than eagerSlots; the
	// ready queue counts the idle ones). started counts the slots whose
	// goroutine started; growMu orders a start with stop's Wait.
	lazy    bool
	started atomic.Int64
	growMu  sync.Mutex
	stopped bool
	// draining stops records from starting: on shutdown the records not
	// started stay uncommitted and run on the partitions' next owners.
	draining atomic.Bool
	// active counts the records taken by a slot and not yet finished: a
	// handler that returned is active until its result is recorded.
	active atomic.Int64
	// occupied counts the slots whose handler runs; nudge wakes the
	// watchdog, which sleeps while none does (a worker with thousands of
	// slots and nothing to run costs no ticks) and otherwise until wake:
	// the earliest deadline of a running handler, or the next look for
	// cancels (Unix nanoseconds).
	occupied atomic.Int64
	nudge    chan struct{}
	wake     atomic.Int64
	// bound holds the records of a queue past MaxRunningPerQueue (nil
	// without one).
	bound *queueBound
	// paused and unwanted hold the records of paused lane queues and,
	// OnDemand, of lane queues nobody wants (heldLines).
	paused, unwanted heldLines
}

// slot is one place to run a handler; cur is the run in it.
type slot struct {
	cur atomic.Pointer[handlerRun]
}

// occupy puts run r in slot sl; the watchdog watches it.
func (s *scheduler) occupy(sl *slot, r *handlerRun) {
	sl.cur.Store(r)
	if s.occupied.Add(1) == 1 || r.ctx.deadline.UnixNano() < s.wake.Load() {
		select {
		case s.nudge <- struct{}{}:
		default:
		}
	}
}

// vacate takes run r out of slot sl, if it is still there.
func (s *scheduler) vacate(sl *slot, r *handlerRun) {
	if sl.cur.CompareAndSwap(r, nil) {
		s.occupied.Add(-1)
	}
}

// handlerRun is a handler running in a slot.
type handlerRun struct {
	ctx       taskCtx
	abandonAt time.Time
	started   time.Time
	state     atomic.Int32 // runRunning, runDone, runAbandoned or runCanceled
	// stopped: a cancel of the task in the control topic canceled its
	// context; unless the handler succeeds all the same, it ends canceled.
	stopped atomic.Bool
	// recorded: its running record committed; from: when its work
	// started, as that record says (unix ns; 0: waiting to start, no
	// record yet). See running.go.
	recorded atomic.Bool
	from     atomic.Int64
	it       *item
	task     *onceq.Task
	key      string
}

const (
	runRunning   int32 = iota
	runDone            // the handler returned in time
	runAbandoned       // past its time-to-run and grace: recorded as failed
	runCanceled        // canceled at shutdown: its result is dropped
)

// cancelCheckEvery is how often the watchdog looks, while handlers run,
// for those whose task was canceled in the control topic. Time-to-run is
// enforced at its deadline, to within a timer's precision.
const cancelCheckEvery = 100 * time.Millisecond

func newScheduler(w *Worker, n, buffered int) *scheduler {
	// The ready queue holds at most the records buffered, fetched and
	// read ahead (each bounded by buffered), and those the slots hand
	// on: never full, so that a slot never waits to queue the record
	// its finish let go.
	s := &scheduler{w: w, ready: newReadyQueue(2*buffered+n, n > eagerSlots), slots: make([]*slot, n), quit: make(chan struct{}), nudge: make(chan struct{}, 1),
		lazy: n > eagerSlots}
	for i := range s.slots {
		s.slots[i] = &slot{}
	}
	if w.cfg.maxPerQueue > 0 {
		s.bound = newQueueBound(w.cfg.maxPerQueue)
	}
	return s
}

// eagerSlots is the most slots a scheduler starts all at once.
const eagerSlots = 256

// run starts the slots (of a lazy scheduler, the first) and the watchdog.
func (s *scheduler) run() {
	s.wg.Add(1)
	go s.watchdog()
	if s.lazy {
		s.grow()
		return
	}
	s.started.Store(int64(len(s.slots)))
	for _, sl := range s.slots {
		s.wg.Add(1)
		go s.loop(sl)
	}
}

// loop runs records in a slot until the scheduler stops.
func (s *scheduler) loop(sl *slot) { s.loopFrom(sl, false) }

// grow starts the next slot, if there is one and the scheduler runs.
func (s *scheduler) grow() {
	s.growMu.Lock()
	defer s.growMu.Unlock()
	i := s.started.Load()
	if s.stopped || i == int64(len(s.slots)) {
		return
	}
	s.started.Store(i + 1)
	s.ready.idle.Add(1) // idle from now: the records after this one want another
	s.wg.Add(1)
	go s.loopFrom(s.slots[i], true)
}

// submit queues a partition's admitted records, in offset order: each one
// behind the earlier records holding its keys, or ready at once.
func (s *scheduler) submit(ps *partState, items []*item) {
	if len(items) == 0 {
		return
	}
	ps.mu.Lock()
	if ps.revoked {
		ps.mu.Unlock()
		s.w.dropped(len(items))
		return
	}
	ready := s.queueLocked(ps, items)
	ps.mu.Unlock()
	s.start(ready)
}

// queueLocked puts items behind the records holding their keys and
// returns those that may start at once; ps.mu is held.
func (s *scheduler) queueLocked(ps *partState, items []*item) (ready []*item) {
	eos := s.w.cfg.guarantee == ExactlyOnce
	for _, it := range items {
		it.setKeys(eos)
		if _, ok := ps.ahead[it.rec.Offset]; ok {
			// The run ahead and the fetch's turn of one record: the
			// second waits for the first and finds it processed.
			it.keys[it.nkeys] = aheadKey(it.rec.Offset)
			it.nkeys++
		}
		if it.prio = recordPriority(it.rec); it.prio > 0 {
			s.w.ahead.sawPriority(ps.tp.Topic)
		}
		ps.refresh(it)
		for _, k := range it.keys[:it.nkeys] {
			if waiters, held := ps.keys[k]; held {
				ps.keys[k] = append(waiters, it)
				it.waits++
			} else {
				ps.keys[k] = nil
			}
		}
		if it.waits == 0 {
			ready = append(ready, it)
		} else {
			ps.waiting++
		}
	}
	return ready
}

// setKeys sets what orders the record: its key (a lane queue's within its
// queue: orderKey), if it has one, and under exactly-once its idempotency
// key, so that a duplicate runs after the record it duplicates and finds
// it processed. Records without a key are ordered only by their
// idempotency keys, if any.
func (it *item) setKeys(eos bool) {
	it.nkeys = 0
	if k := orderKey(it.rec); k != "" {
		it.keys[0], it.nkeys = k, 1
	}
	if eos && it.idem && (it.nkeys == 0 || it.keys[0] != it.dedupKey) {
		it.keys[it.nkeys] = it.dedupKey
		it.nkeys++
	}
}

// start hands records that their keys let start to the slots, or to their
// queues' lines (MaxRunningPerQueue). items is start's to reuse.
func (s *scheduler) start(items []*item) {
	items = s.holdUnwanted(s.holdPaused(items))
	if s.bound != nil {
		items = s.bound.take(items)
	}
	s.send(items...)
}

// send hands records to the slots; a lazy scheduler whose started slots
// are all busy starts another.
func (s *scheduler) send(items ...*item) {
	for _, it := range items {
		if n := s.ready.push(it, s.quit); s.lazy && s.ready.wanted(n) {
			s.grow()
		}
	}
}

// loopFrom is loop; counted: grow counted the slot idle already.
func (s *scheduler) loopFrom(sl *slot, counted bool) {
	defer s.wg.Done()
	for ; ; counted = false {
		if s.lazy && !counted {
			s.ready.idle.Add(1)
		}
		it, left := s.ready.pop(s.quit)
		if it == nil {
			return
		}
		if s.lazy && left > 0 && s.ready.wanted(left) {
			s.grow()
		}
		if s.draining.Load() || it.stale() {
			s.w.finish(it, nil)
			continue
		}
		s.active.Add(1)
		res, takenOver := s.w.execute(sl, it, s.quit)
		if takenOver {
			return // the watchdog gave this slot, and the record, to another goroutine
		}
		s.w.finish(it, res)
		s.active.Add(-1)
	}
}

// done is told of every record a slot took, once it finished: the first
// in its queue's line, if any, takes its place.
func (s *scheduler) done(it *item) {
	if s.bound == nil {
		return
	}
	if next := s.bound.done(it); next != nil {
		s.send(next)
	}
}

// drop takes a revoked partition's records out of the lines and returns
// how many it took.
func (s *scheduler) drop(ps *partState) int {
	n := s.paused.drop(ps) + s.unwanted.drop(ps)
	if s.bound == nil {
		return n
	}
	return n + s.bound.drop(ps)
}

// stop ends the slots and waits for them no longer than their handlers
// take to notice their canceled contexts.
func (s *scheduler) stop() {
	s.draining.Store(true)
	s.growMu.Lock()
	s.stopped = true
	s.growMu.Unlock()
	close(s.quit)
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
}

// running calls fn for each handler running now.
func (s *scheduler) running(fn func(*handlerRun)) {
	for _, sl := range s.slots[:s.started.Load()] {
		if r := sl.cur.Load(); r != nil {
			fn(r)
		}
	}
}

// busy is how many records slots are working on: running their handlers
// or recording their results.
func (s *scheduler) busy() int { return int(s.active.Load()) }

// cancelAll cancels the handlers still running at the shutdown timeout;
// their results are dropped, so their records stay uncommitted and run
// again. It returns how many it canceled.
func (s *scheduler) cancelAll() int {
	n := 0
	s.running(func(r *handlerRun) {
		if r.state.CompareAndSwap(runRunning, runCanceled) {
			r.ctx.cancel(context.Canceled)
			n++
		}
	})
	return n
}

// cancelPartition cancels the handlers of a revoked partition: their
// results would be dropped.
func (s *scheduler) cancelPartition(ps *partState) {
	s.running(func(r *handlerRun) {
		if r.it.ps == ps {
			r.ctx.cancel(context.Canceled)
		}
	})
}

// watchdog enforces time-to-run on the running handlers and stops the
// canceled ones: it sleeps while none runs, and otherwise until the
// earliest deadline or the next look for cancels, whichever is first. A
// handler that starts with an earlier deadline nudges it (occupy).
func (s *scheduler) watchdog() {
	defer s.wg.Done()
	t := time.NewTimer(cancelCheckEvery)
	defer t.Stop()
	for {
		if s.occupied.Load() == 0 {
			s.wake.Store(math.MaxInt64)
			t.Stop()
			select {
			case <-s.quit:
				return
			case <-s.nudge:
			}
		}
		// A bound first: a handler that starts during the look, with an
		// earlier deadline, nudges for another.
		now := time.Now()
		s.wake.Store(now.Add(cancelCheckEvery).UnixNano())
		next := s.check(now)
		s.wake.Store(next.UnixNano())
		t.Reset(time.Until(next))
		select {
		case <-s.quit:
			return
		case <-t.C:
		case <-s.nudge:
		}
	}
}

// check cancels the contexts of the handlers past their time-to-run or
// canceled, takes over the slots of those past their grace too, and
// returns when to look again.
func (s *scheduler) check(now time.Time) time.Time {
	next := now.Add(cancelCheckEvery)
	for _, sl := range s.slots[:s.started.Load()] {
		r := sl.cur.Load()
		if r == nil {
			continue
		}
		if !now.Before(r.ctx.deadline) {
			r.ctx.cancel(context.DeadlineExceeded)
		} else if r.ctx.deadline.Before(next) {
			next = r.ctx.deadline
		}
		s.stopIfCanceled(r)
		next = s.w.noteRunning(r, now, next)
		if now.After(r.abandonAt) {
			if r.state.CompareAndSwap(runRunning, runAbandoned) {
				s.wg.Add(1)
				go s.takeOver(sl, r)
			}
		} else if r.abandonAt.Before(next) {
			next = r.abandonAt.Add(time.Nanosecond) // past it: After is strict
		}
	}
	return next
}

// stopIfCanceled cancels the context of a running handler whose task was
// canceled in the control topic since it started. A workflow's cancel
// (of its ID in the workflow queue) lets its running steps finish: it
// only keeps the next ones from starting.
func (s *scheduler) stopIfCanceled(r *handlerRun) {
	queue := r.task.Queue // a lane queue's, whose cancels name it, not its lane
	if queue == "" {
		queue = r.it.rec.Topic
	}
	if queue == onceq.WorkflowQueue || !s.w.control.Canceled(queue, r.task.ID) || !r.stopped.CompareAndSwap(false, true) {
		return
	}
	s.w.cfg.log.Info("running task canceled: its context is canceled", "id", r.task.ID, "queue", queue, "attempt", r.task.Attempt)
	r.ctx.cancel(context.Canceled)
}

// takeOver records an abandoned run as a failure and carries on with its
// slot in a new goroutine.
func (s *scheduler) takeOver(sl *slot, r *handlerRun) {
	w := s.w
	w.metrics.abandoned.Inc()
	w.cfg.log.Error("handler abandoned: it ignored its canceled context", "id", r.task.ID, "time_to_run", r.ctx.timeout, "grace", w.cfg.abandonGrace)
	s.vacate(sl, r)
	res := w.retryInPlace(r.it, s.quit, func() (*result, error) {
		return w.failure(r.task, r.key, errAbandoned, r.started)
	})
	if res != nil {
		res.src = r.it.rec
	}
	w.finish(r.it, res)
	s.active.Add(-1) // taken over from the abandoned goroutine
	s.loop(sl)       // loop's deferred Done pairs with this goroutine's Add
}

// taskCtx is a handler's context: its deadline is its time-to-run, which
// the watchdog enforces. It allocates a Done channel only for handlers
// that ask for one.
type taskCtx struct {
	deadline time.Time
	timeout  time.Duration
	mu       sync.Mutex
	done     chan struct{}
	err      error
	// values answers Value: the run's trace (nil: the run is not traced,
	// and the context holds no values).
	values context.Context
}

var _ context.Context = (*taskCtx)(nil)

func (c *taskCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *taskCtx) Value(key any) any {
	if c.values == nil {
		return nil
	}
	return c.values.Value(key)
}

func (c *taskCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		}
	}
	return c.done
}

func (c *taskCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// cancel cancels the context with err, once.
func (c *taskCtx) cancel(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		if c.done != nil {
			close(c.done)
		}
	}
}
