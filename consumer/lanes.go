package consumer

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
)

// item is one fetched record on its way through a lane.
type item struct {
	ps    *partState
	epoch uint64
	rec   *kgo.Record
	// known is the dedup-key lookup made when the record was dispatched,
	// in the checkpoint and the overlay of writes in flight (see
	// partState.lookup): a lane need not repeat it.
	knownKey string
	known    bool
	looked   bool // known is the checkpoint's answer (the lookup did not fail)
	// twin: a record of the same dedup key was dispatched before it since
	// the last commit, to the same lane (see lanes.submit).
	twin bool
}

// lanes run handlers with key-ordered concurrency: a record goes to the
// lane its partition and key hash to, and each lane runs its records one
// at a time, in order. Records of one key therefore run in offset order;
// records of different keys run concurrently on up to n lanes.
//
// Handlers run inline on their lane's goroutine. A watchdog cancels the
// context of a handler past its time-to-run and, after the grace period,
// abandons it: a new goroutine takes the lane over and records the run as
// failed, and the old one exits when the handler returns.
type lanes struct {
	w     *Worker
	seed  maphash.Seed
	lanes []*lane
	wg    sync.WaitGroup
	quit  chan struct{}
}

type lane struct {
	ch  chan []*item // a partition's records of one poll that hash here, in order
	cur atomic.Pointer[handlerRun]

	// Owned by the goroutine running the lane, and handed over with the
	// lane when the watchdog takes it over.
	rest []*item    // the current batch's records not started yet
	done []finished // finished records not reported yet
}

// finished is a record a lane finished, and its result (nil: dropped).
type finished struct {
	it  *item
	res *result
}

// handlerRun is a handler running on a lane.
type handlerRun struct {
	ctx       taskCtx
	abandonAt time.Time
	state     atomic.Int32 // runRunning, runDone or runAbandoned
	it        *item
	task      *onceq.Task
	key       string
}

const (
	runRunning int32 = iota
	runDone
	runAbandoned
)

// watchdogTick is how often running handlers are checked against their
// time-to-run: deadlines hold to within it.
const watchdogTick = 10 * time.Millisecond

func newLanes(w *Worker, n, buffered int) *lanes {
	l := &lanes{w: w, seed: maphash.MakeSeed(), lanes: make([]*lane, n), quit: make(chan struct{})}
	for i := range l.lanes {
		l.lanes[i] = &lane{ch: make(chan []*item, buffered/n+1)}
		l.wg.Add(1)
		go l.loop(l.lanes[i])
	}
	l.wg.Add(1)
	go l.watchdog()
	return l
}

// submit hands a partition's fetched records to their lanes: one batch per
// lane, in offset order, so a lane wakes once per poll and not once per
// record.
//
// With route (exactly-once), a record whose dedup key is already on its
// way through a lane since the last commit goes to that lane, whatever its
// key: it then runs after its twin and finds it processed, where on
// another lane the two could run at once. The items are of one partition,
// whose routes its lock guards; the lock is not held while sending, since
// lanes take it too.
func (l *lanes) submit(items []*item, route bool) {
	if len(items) == 0 {
		return
	}
	ps := items[0].ps
	if route {
		ps.mu.Lock()
	}
	per := make([][]*item, len(l.lanes))
	for _, it := range items {
		var h maphash.Hash
		h.SetSeed(l.seed)
		h.WriteString(it.rec.Topic)
		h.WriteByte(byte(it.rec.Partition))
		h.WriteByte(byte(it.rec.Partition >> 8))
		h.Write(it.rec.Key)
		i := int(h.Sum64() % uint64(len(l.lanes)))
		if route {
			if j, ok := ps.routes[it.knownKey]; ok {
				i, it.twin = j, true
			} else {
				ps.routes[it.knownKey] = i
			}
		}
		per[i] = append(per[i], it)
	}
	if route {
		ps.mu.Unlock()
	}
	for i, batch := range per {
		if len(batch) == 0 {
			continue
		}
		select {
		case l.lanes[i].ch <- batch:
		case <-l.quit:
			return
		}
	}
}

// stop abandons what is queued and waits for running handlers no longer
// than they take to notice their canceled context.
func (l *lanes) stop() {
	close(l.quit)
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
}

// loop runs the lane's batches. Results are reported a batch at a time.
func (l *lanes) loop(ln *lane) {
	defer l.wg.Done()
	for {
		for len(ln.rest) > 0 {
			it := ln.rest[0]
			ln.rest = ln.rest[1:]
			res, takenOver := l.w.execute(ln, it, l.quit)
			if takenOver {
				return // the watchdog gave this lane, rest and done included, to another goroutine
			}
			ln.done = append(ln.done, finished{it, res})
			if len(ln.done) == reportEvery {
				l.flush(ln)
			}
		}
		l.flush(ln)
		select {
		case ln.rest = <-ln.ch:
		case <-l.quit:
			return
		}
	}
}

// reportEvery bounds the finished records a lane holds before reporting
// them; finishedKey scans them.
const reportEvery = 64

func (l *lanes) flush(ln *lane) {
	if len(ln.done) > 0 {
		l.w.finish(ln.done)
		clear(ln.done)
		ln.done = ln.done[:0]
	}
}

// finishedKey reports whether the lane finished a record with this dedup
// key that it has not reported yet.
func (ln *lane) finishedKey(key string) bool {
	for _, d := range ln.done {
		if d.res != nil && d.res.id == key {
			return true
		}
	}
	return false
}

// watchdog enforces time-to-run on the running handlers.
func (l *lanes) watchdog() {
	defer l.wg.Done()
	t := time.NewTicker(watchdogTick)
	defer t.Stop()
	for {
		select {
		case <-l.quit:
			return
		case now := <-t.C:
			for _, ln := range l.lanes {
				r := ln.cur.Load()
				if r == nil {
					continue
				}
				if now.After(r.ctx.deadline) {
					r.ctx.expire()
				}
				if now.After(r.abandonAt) && r.state.CompareAndSwap(runRunning, runAbandoned) {
					l.wg.Add(1)
					go l.takeOver(ln, r)
				}
			}
		}
	}
}

// takeOver records an abandoned run as a failure and carries on with its
// lane in a new goroutine.
func (l *lanes) takeOver(ln *lane, r *handlerRun) {
	w := l.w
	w.metrics.abandoned.Inc()
	w.cfg.log.Error("handler abandoned: it ignored its canceled context", "id", r.task.ID, "time_to_run", r.ctx.timeout, "grace", w.cfg.abandonGrace)
	ln.cur.CompareAndSwap(r, nil)
	res := w.retryInPlace(r.it, l.quit, func() (*result, error) {
		return w.failure(r.task, r.key, errAbandoned)
	})
	ln.done = append(ln.done, finished{r.it, res})
	l.loop(ln) // loop's deferred Done pairs with this goroutine's Add
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
}

var _ context.Context = (*taskCtx)(nil)

func (c *taskCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *taskCtx) Value(any) any               { return nil }

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

// expire cancels the context with DeadlineExceeded, once.
func (c *taskCtx) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = context.DeadlineExceeded
		if c.done != nil {
			close(c.done)
		}
	}
}

// stale reports whether the item's partition moved on: revoked, or reset
// by an aborted commit.
func (it *item) stale() bool {
	it.ps.mu.Lock()
	defer it.ps.mu.Unlock()
	return it.ps.revoked || it.ps.epoch != it.epoch
}
