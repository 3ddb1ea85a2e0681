package consumer

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/checkpoint"
)

// The lookahead. Priority orders the records a worker holds (readyQueue),
// and it holds at most MaxBufferedRecords: behind a longer backlog, a task
// of a higher priority would wait until the worker fetched up to it. So
// while the worker is backlogged (it holds half the records it may or
// more), a second client reads its partitions from the fetch position on,
// and admits at once the records of a priority above 0, out of offset
// order.
//
// Exactly once: a record run ahead finishes like any other. Its result
// commits in the worker's transaction, and its offset, above the
// partition's committed offset, joins the finished ranges that commit
// writes. When the fetch reaches it, it is a duplicate of that run: in
// flight, it waits behind it (aheadKey); finished, partState.ahead says
// so; committed, the finished ranges do, on this worker or on the
// partition's next owner. At least once, the finished ranges are not
// kept: a record run ahead that the worker loses before its fetch
// reaches it (a crash, a rebalance) runs again on the next owner, as at
// least once allows.
//
// Key order: a record runs ahead only if no record the lookahead passed
// over, between the fetch position and it, holds its key or its
// idempotency key. Those it did not pass over are the fetch's, already in
// the scheduler's order, or after it.
//
// It reads only the topics that use priorities: those of a priority note
// on the control topic (control.PriorityNote, which onceq's producers and
// workers write when they submit a task of a priority above 0) and those
// in which the worker's fetch met such a task. A queue without priorities
// pays nothing for it: no second fetch, no keys remembered.
//
// The lookahead reads a partition at most PriorityLookahead records ahead
// of the fetch position, holds at most lookaheadKeys passed-over keys, and
// at most MaxBufferedRecords records admitted ahead and not finished: past
// any of these it stops reading the partition until the fetch catches up
// with where it stopped. It reads only restored partitions: the fetch
// restores one on its first record, and the lookahead restores those the
// fetch has not reached yet (lookahead_restore.go).

// lookaheadWait is the longest a fetch of the lookahead waits for records:
// a partition added meanwhile is fetched from the next one on.
const lookaheadWait = 10 * time.Millisecond

// lookaheadKeys bounds the passed-over keys a worker remembers, over all
// its partitions.
const lookaheadKeys = 1_000_000

// lookahead reads ahead of the worker's fetch; made by newLookahead, its
// client by startLocked.
type lookahead struct {
	w     *Worker
	limit int64 // PriorityLookahead: records ahead of the fetch position, per partition
	open  int   // MaxBufferedRecords: records admitted ahead and not finished, at most
	// running counts the records admitted ahead and not finished, in
	// partitions not revoked (partState.aheadRunning).
	running atomic.Int64

	// fetched holds the topics in which the worker's fetch met a task of
	// a priority above 0 (sawPriority), as topic -> struct{}.
	fetched sync.Map

	lastScan atomic.Int64 // unix ns of scan's last look
	reading  atomic.Int32 // len(parts)
	expect   atomic.Int64 // unix ns until which a joined backlog counts as one (assigned)

	// ctx ends with close (stop): it bounds run and the restores, which
	// restores counts.
	ctx      context.Context
	stop     context.CancelFunc
	restores sync.WaitGroup

	mu     sync.Mutex
	cl     *kgo.Client // nil until the first backlog (startLocked); only run calls it
	failed bool        // no client could be made: it reads nothing
	// changes are the partitions to start or stop reading, for run,
	// whose poll pollCancel cuts short.
	changes    []aheadChange
	pollCancel context.CancelFunc
	parts      map[checkpoint.TP]*aheadPart
	keys       int  // passed-over keys over all parts
	closed     bool // close was called: nothing more starts
	done       chan struct{}
}

// aheadPart is a partition the lookahead reads.
type aheadPart struct {
	ps  *partState
	pos int64 // the offset after the last record read
	// passed are the keys and idempotency keys of the records passed
	// over, with the offset of the last one of each: those below the
	// fetch position are the fetch's concern.
	passed map[string]int64
}

func newLookahead(w *Worker) *lookahead {
	if w.cfg.lookahead == 0 {
		return nil
	}
	ctx, stop := context.WithCancel(context.Background())
	return &lookahead{w: w, limit: int64(w.cfg.lookahead), open: w.cfg.maxBuffered,
		parts: map[checkpoint.TP]*aheadPart{}, ctx: ctx, stop: stop}
}

// consider starts reading ps ahead of the fetch while the worker is
// backlogged, if its topic uses priorities, and stops reading every
// partition once the worker is not backlogged. At most once a second it
// looks at every partition of the worker (scan).
func (la *lookahead) consider(ps *partState) {
	if la == nil {
		return
	}
	if !la.backlogged() {
		if la.reading.Load() > 0 {
			la.stopAll() // the fetch keeps up
		}
		return
	}
	if la.uses(ps.tp.Topic) {
		la.add(ps)
	}
	la.scan()
}

// sawPriority notes that the fetch met a task of a priority above 0 in
// topic.
func (la *lookahead) sawPriority(topic string) {
	if la == nil {
		return
	}
	if _, ok := la.fetched.Load(topic); !ok {
		la.fetched.Store(topic, struct{}{})
	}
}

// uses reports whether topic uses priorities: a priority note of it was
// read from the control topic, or the fetch met a task of a priority
// above 0 in it.
func (la *lookahead) uses(topic string) bool {
	if _, ok := la.fetched.Load(topic); ok {
		return true
	}
	return la.w.control != nil && la.w.control.PriorityNoted(topic)
}

// using returns the partitions of parts whose topics use priorities.
func (la *lookahead) using(parts []*partState) []*partState {
	var out []*partState
	for _, ps := range parts {
		if la.uses(ps.tp.Topic) {
			out = append(out, ps)
		}
	}
	return out
}

// add starts reading ps, unless it is read already or cannot be yet.
func (la *lookahead) add(ps *partState) {
	ps.mu.Lock()
	from := ps.offsets.next
	if from < 0 {
		from = ps.aheadStart // nothing fetched yet: where the fetch starts
	}
	ok := ps.restored && !ps.revoked && from >= 0 && from >= ps.aheadFrom
	ps.mu.Unlock()
	if !ok {
		return
	}
	la.mu.Lock()
	defer la.mu.Unlock()
	if la.done == nil && !la.startLocked() {
		return
	}
	if old := la.parts[ps.tp]; old != nil {
		if old.ps == ps {
			return
		}
		la.removeLocked(ps.tp) // an earlier assignment's
	}
	la.parts[ps.tp] = &aheadPart{ps: ps, pos: from, passed: map[string]int64{}}
	la.reading.Store(int32(len(la.parts)))
	la.changeLocked(aheadChange{tp: ps.tp, add: true, from: from})
}

// scan adds, at most once a second, every partition it can that is not
// quiet (quiet.go: a wake-up has the fetch take it up), and restores those
// not quiet from which the fetch has received nothing yet (restoreAhead):
// a quiet one holds nothing past its committed offset.
func (la *lookahead) scan() {
	now := time.Now().UnixNano()
	if last := la.lastScan.Load(); now-last < int64(time.Second) || !la.lastScan.CompareAndSwap(last, now) {
		return
	}
	w := la.w
	var todo, active []*partState
	w.mu.Lock()
	for _, ps := range w.parts {
		if !la.uses(ps.tp.Topic) {
			continue
		}
		ps.mu.Lock()
		switch {
		case ps.q.quiet:
		case ps.notStartedLocked():
			todo = append(todo, ps)
		case ps.restored:
			active = append(active, ps)
		}
		ps.mu.Unlock()
	}
	w.mu.Unlock()
	for _, ps := range active {
		la.add(ps)
	}
	la.restoreAhead(todo, false)
}

// startLocked makes the client and starts reading, on the first backlog
// (a worker that never has one makes none); la.mu is held. It reports
// whether the lookahead runs.
func (la *lookahead) startLocked() bool {
	if la.failed || la.closed {
		return false
	}
	// The fetch's own limits (newKafkaSide): at the client's defaults, one
	// fetch of a backlog of small tasks, which compress well, decodes to
	// hundreds of thousands of records at once.
	cl, err := la.w.cfg.conn.NewClient(kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ClientID("onceq-lookahead-"+la.w.instanceID), kgo.FetchMaxWait(lookaheadWait),
		kgo.FetchMaxBytes(fetchMaxBytes), kgo.FetchMaxPartitionBytes(fetchMaxPartitionBytes))
	if err != nil {
		la.w.cfg.log.Warn("lookahead: no client; tasks of higher priority wait for the fetch", "err", err)
		la.failed = true
		return false
	}
	la.cl, la.done = cl, make(chan struct{})
	go la.run(la.ctx)
	return true
}

// aheadChange is a partition to start or stop reading.
type aheadChange struct {
	tp   checkpoint.TP
	add  bool
	from int64
}

// changeLocked asks run to start or stop reading a partition, and cuts
// its poll short; la.mu is held. Only run calls the client: the group's
// callbacks, which take la.mu, never wait for it.
func (la *lookahead) changeLocked(c aheadChange) {
	la.changes = append(la.changes, c)
	if la.pollCancel != nil {
		la.pollCancel()
	}
}

// run reads until close, applying the changes asked for between polls.
func (la *lookahead) run(ctx context.Context) {
	defer close(la.done)
	for {
		pctx, cancel := context.WithCancel(ctx)
		la.mu.Lock()
		changes := la.changes
		la.changes, la.pollCancel = nil, cancel
		la.mu.Unlock()
		for _, c := range changes {
			if c.add {
				la.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{c.tp.Topic: {c.tp.Partition: kgo.NewOffset().At(c.from)}})
			} else {
				la.cl.RemoveConsumePartitions(map[string][]int32{c.tp.Topic: {c.tp.Partition}})
			}
		}
		fs := la.cl.PollRecords(pctx, 10_000)
		cancel()
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				la.w.cfg.log.Debug("lookahead: fetch failed; it goes on", "topic", topic, "partition", p, "err", err)
			}
		})
		fs.EachPartition(la.take)
	}
}

// take reads one partition's fetched records: it admits those that may
// run ahead and remembers the keys of the others.
func (la *lookahead) take(fp kgo.FetchTopicPartition) {
	if len(fp.Records) == 0 {
		return
	}
	la.w.metrics.aheadRead.Add(float64(len(fp.Records)))
	ps, cands := la.read(fp)
	if len(cands) > 0 {
		la.admit(ps, cands)
	}
}

// read goes through one partition's fetched records and returns those
// that may run ahead.
func (la *lookahead) read(fp kgo.FetchTopicPartition) (*partState, []*item) {
	tp := checkpoint.TP{Topic: fp.Topic, Partition: fp.Partition}
	la.mu.Lock()
	defer la.mu.Unlock()
	ap := la.parts[tp]
	if ap == nil {
		return nil, nil // removed while fetched
	}
	ps := ap.ps
	ps.mu.Lock()
	next, revoked := ps.offsets.next, ps.revoked
	at := next // the fetch position: where the fetch starts, before its first record
	if at < 0 {
		at = ps.aheadStart
	}
	ps.mu.Unlock()
	if revoked {
		la.removeLocked(tp)
		return nil, nil
	}
	var cands []*item
	running := int(la.running.Load())
	for _, r := range fp.Records {
		if r.Offset < ap.pos {
			continue
		}
		ap.pos = r.Offset + 1
		if r.Attrs.IsControl() || r.Offset < at {
			continue // a marker, or the fetch's already
		}
		key := orderKey(r)
		dedup, idem := onceq.DedupKeyOf(r)
		free := (key == "" || !ap.holds(key, at)) && (!idem || !ap.holds(idemKey(dedup), at))
		if free && running+len(cands) < la.open && recordPriority(r) > 0 {
			cands = append(cands, &item{ps: ps, rec: r, ahead: true})
			continue
		}
		if key != "" {
			la.pass(ap, key, r.Offset)
		}
		if idem {
			la.pass(ap, idemKey(dedup), r.Offset)
		}
	}
	if la.keys >= lookaheadKeys {
		la.prune(ap, at)
	}
	if at >= ap.pos && !la.backlogged() {
		la.removeLocked(tp) // caught up with by the fetch, which keeps up
	} else if ap.pos-at >= la.limit || la.keys >= lookaheadKeys || running+len(cands) >= la.open {
		// Far enough ahead: the fetch resumes the lookahead once it
		// reaches here.
		ps.mu.Lock()
		ps.aheadFrom = ap.pos
		ps.mu.Unlock()
		la.removeLocked(tp)
	}
	return ps, cands
}

// backlogged reports whether the worker holds at least half the records
// it may buffer: the fetch then waits for room, and a record written now
// waits behind those the fetch and its client hold.
func (la *lookahead) backlogged() bool {
	return la.w.buffered.Load() >= int64(la.w.cfg.maxBuffered/2) || time.Now().UnixNano() < la.expect.Load()
}

// holds reports whether a record passed over at or above the fetch
// position next holds key.
func (ap *aheadPart) holds(key string, next int64) bool {
	off, ok := ap.passed[key]
	return ok && off >= next
}

// pass remembers a passed-over key; la.mu is held.
func (la *lookahead) pass(ap *aheadPart, key string, off int64) {
	if _, ok := ap.passed[key]; !ok {
		la.keys++
	}
	ap.passed[key] = off
}

// prune forgets the passed-over keys below the fetch position.
func (la *lookahead) prune(ap *aheadPart, next int64) {
	for k, off := range ap.passed {
		if off < next {
			delete(ap.passed, k)
			la.keys--
		}
	}
}

// admit hands the records that may run ahead to the scheduler, those the
// fetch has not reached meanwhile.
func (la *lookahead) admit(ps *partState, items []*item) {
	if len(items) == 0 {
		return
	}
	w := la.w
	if err := ps.lookup(items); err != nil {
		w.cfg.log.Warn("looking up processed IDs; each task asks again when it starts", "err", err)
	}
	ps.queueMu.Lock() // no fetched record between admission and its key's line
	ps.mu.Lock()
	if ps.revoked {
		ps.mu.Unlock()
		ps.queueMu.Unlock()
		return
	}
	// Queued in the step that admits them: the fetch's turn of one
	// queues behind it.
	admitted := items[:0]
	for _, it := range items {
		if it.rec.Offset >= ps.offsets.next {
			ps.ahead[it.rec.Offset] = false
			admitted = append(admitted, it)
		}
	}
	ps.aheadRunning += len(admitted)
	ps.aheadOpen = &la.running
	la.running.Add(int64(len(admitted)))
	w.buffered.Add(int64(len(admitted)))
	ready := w.sched.queueLocked(ps, admitted)
	ps.mu.Unlock()
	ps.queueMu.Unlock()
	w.metrics.ahead.Add(float64(len(admitted)))
	w.sched.start(ready)
}

// removeLocked stops reading tp; la.mu is held.
func (la *lookahead) removeLocked(tp checkpoint.TP) {
	ap := la.parts[tp]
	if ap == nil {
		return
	}
	la.keys -= len(ap.passed)
	delete(la.parts, tp)
	la.reading.Store(int32(len(la.parts)))
	la.changeLocked(aheadChange{tp: tp})
}

// stopAll stops reading every partition.
func (la *lookahead) stopAll() {
	la.mu.Lock()
	defer la.mu.Unlock()
	for tp := range la.parts {
		la.removeLocked(tp)
	}
}

// drop stops reading a released partition.
func (la *lookahead) drop(ps *partState) {
	if la == nil {
		return
	}
	la.mu.Lock()
	defer la.mu.Unlock()
	if ap := la.parts[ps.tp]; ap != nil && ap.ps == ps {
		la.removeLocked(ps.tp)
	}
}

// close stops the lookahead and waits for it.
func (la *lookahead) close() {
	if la == nil {
		return
	}
	la.mu.Lock()
	la.closed = true // under mu: no restore or client starts after it
	la.stop()
	done := la.done
	la.mu.Unlock()
	la.restores.Wait()
	if done == nil {
		return
	}
	<-done
	la.cl.Close()
}

// aheadKey is what orders the run ahead of the record at off and the
// fetch's turn of it (scheduler.queueLocked).
func aheadKey(off int64) string { return "\x00ahead/" + strconv.FormatInt(off, 10) }

// idemKey is an idempotency key among the passed-over keys, apart from
// record keys.
func idemKey(k string) string { return "\x00id/" + k }
