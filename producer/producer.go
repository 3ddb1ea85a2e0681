package producer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/internal/ctltopic"
	"github.com/onceq/onceq/internal/tracing"
)

// ErrClosed is returned for tasks submitted after Close, and for tasks
// still buffered when Close gave up waiting for them.
var ErrClosed = errors.New("producer: closed")

// closeFlushTimeout bounds how long Close waits for buffered tasks.
const closeFlushTimeout = 30 * time.Second

// Receipt tells where a task was written.
type Receipt struct {
	// ID is the task's ID, assigned by the producer if it had none. It is
	// set on errors too, so that a task can be resubmitted with its ID.
	ID string
	// Topic is the queue, or the delay bucket topic when Delayed.
	Topic     string
	Partition int32
	Offset    int64
	// Delayed is true when the task went to a delay bucket.
	Delayed bool
}

// Producer submits tasks. It is safe for concurrent use. Create it with
// New and release it with Close.
type Producer struct {
	cfg    config
	cl     *kgo.Client // idempotent, acks=all
	m      *metrics
	slots  *admission // one slot per task not yet acknowledged
	closed atomic.Bool
	ids    *idSource // IDs for tasks without one
	clock  *clock    // the millisecond clock of plain tasks
	epoch  time.Time // when New ran; latency samples count from it
	// promise is p.promised, made a func value once: the promise of
	// every record SubmitAsync produces.
	promise func(*kgo.Record, error)

	topics sync.Map // topic name -> *topicState
	// lastQueue is the state of the queue of the last task routed.
	lastQueue atomic.Pointer[topicState]

	admOnce sync.Once
	adm     *broker.Admin // created by the first topic lookup
	admErr  error

	// The topics of the hints (wake.go).
	wakeTopic, controlTopic hintTopic

	// ladder is the planner delayed tasks route by, read from the
	// cluster by the first of them (see planner).
	ladderMu sync.Mutex
	ladder   atomic.Pointer[delay.Planner]

	txMu sync.Mutex
	txcl *kgo.Client // transactional, created by the first Tx
	// txUnasked is set by the transactional client's logger when the
	// client turns a commit into an abort by itself (see broker.TxLogger).
	txUnasked atomic.Bool
}

// New checks the options, connects and returns a producer. It does not
// wait for the brokers: the first submission does.
func New(opts ...Opt) (*Producer, error) {
	cfg, err := build(opts)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.registerer, cfg.aggregate)
	if err != nil {
		return nil, err
	}
	p := &Producer{cfg: cfg, m: m, slots: newAdmission(cfg.maxBuffered), ids: newIDSource(), clock: newClock(), epoch: time.Now(),
		wakeTopic:    hintTopic{name: broker.WakeTopic, what: "workers find this producer's tasks on quiet queues a little later"},
		controlTopic: hintTopic{name: ctltopic.Topic, what: "workers read ahead of a backlog for its tasks of a priority above 0 only once they met one"}}
	p.promise = p.promised
	if p.cl, err = cfg.conn.NewClient(clientOpts(cfg)...); err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	return p, nil
}

// clientOpts are the franz-go options of the idempotent client. The
// benchmark builds its raw franz-go client from the same ones.
func clientOpts(cfg config) []kgo.Opt {
	return []kgo.Opt{
		// acks=all and idempotence are franz-go's defaults; acks is
		// spelled out, and no option here disables idempotence.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(cfg.linger),
		// Admission control is the slots semaphore, which honours the
		// caller's context. The client's own limit sits above it so that
		// Produce never blocks.
		kgo.MaxBufferedRecords(2 * cfg.maxBuffered),
		kgo.ProducerBatchMaxBytes(int32(cfg.maxMessageBytes)),
		kgo.WithLogger(broker.KgoLogger(cfg.log)),
	}
}

// Submit writes a task and returns once the brokers acknowledged it
// (acks=all, idempotent: the client's retries never duplicate it). A task
// with a Delay or a future Due goes to a delay bucket.
//
// Invalid tasks are refused before anything is sent, with an error that
// wraps the onceq error kind: errors.Is(err, onceq.ErrInvalidQueue). If ctx
// ends before the acknowledgment, Submit returns ctx's error and the task
// may still be written. A task with an ID of your own can then be
// submitted again: duplicates of one ID run once. An ID the producer
// generated is not an idempotency key (onceq.Task.GeneratedID): workers
// keep no mark of it, so a task that must survive such a retry without a
// second run needs an ID of your own.
func (p *Producer) Submit(ctx context.Context, task onceq.Task) (Receipt, error) {
	type result struct {
		rc  Receipt
		err error
	}
	done := make(chan result, 1)
	id := p.submit(ctx, task, func(rc Receipt, err error) { done <- result{rc, err} }, true)
	select {
	case r := <-done:
		return r.rc, r.err
	case <-ctx.Done():
		select {
		case r := <-done: // refused before it was sent, or just done
			return r.rc, r.err
		default:
		}
		// The outcome still reaches the metrics when it comes.
		if task.ID == "" {
			return Receipt{ID: id}, fmt.Errorf("producer: task %s: %w: it may still be written; its ID was generated, so a resubmission "+
				"may run a second time: give tasks IDs of your own to resubmit them safely", id, ctx.Err())
		}
		return Receipt{ID: id}, fmt.Errorf("producer: task %s: %w: it may still be written; resubmit it with this ID, duplicates run once", id, ctx.Err())
	}
}

// SubmitAsync submits a task and calls fn, if not nil, with the outcome
// once the brokers acknowledged or refused it; it returns the task's ID. fn runs on
// the producer's callback goroutine, one call at a time in acknowledgment
// order: it must be quick and must not block or call Flush. An invalid
// task is refused before SubmitAsync returns, with fn called in the
// caller's goroutine.
//
// SubmitAsync blocks while MaxBufferedRecords tasks await their
// acknowledgment; ctx bounds that wait and the first lookup of a queue.
// Once buffered, a task is not canceled by ctx: a caller's canceled context
// must not fail other callers' tasks batched with it.
func (p *Producer) SubmitAsync(ctx context.Context, task onceq.Task, fn func(Receipt, error)) string {
	return p.submit(ctx, task, fn, false)
}

// SubmitMany submits tasks as SubmitAsync submits each of them, for a
// caller producing in bulk: the checks and clock reads a call needs once
// are made once, admission slots are taken many at a time, and one fn,
// called with each task's index in tasks, takes the place of a callback
// per task. It returns once every task is buffered or refused; the tasks
// are copied, so the slice may be reused then. IDs the producer assigns
// come in the receipts.
//
// The tasks of one call are submitted at once: a task's Delay counts from
// a time read during the call, not before it, and its enqueue time is the
// call's. fn, if not nil, is called once per task: for an acknowledgment
// or a refusal by the brokers on the producer's callback goroutine, in
// acknowledgment order, and for a task refused before it was sent in the
// caller's goroutine before SubmitMany returns. Calls of those two kinds
// may run at the same time: fn must be safe for that, quick, and must not
// block or call Flush. ctx works as for SubmitAsync.
func (p *Producer) SubmitMany(ctx context.Context, tasks []onceq.Task, fn func(i int, rc Receipt, err error)) {
	if fn == nil {
		fn = func(int, Receipt, error) {}
	}
	// A submission keeps its index in 32 bits. A larger slice (of more
	// than a terabyte) goes in parts.
	for base := 0; len(tasks) > maxMany; base += maxMany {
		part := tasks[:maxMany]
		tasks = tasks[maxMany:]
		p.submitMany(ctx, part, func(i int, rc Receipt, err error) { fn(base+i, rc, err) })
	}
	p.submitMany(ctx, tasks, fn)
}

// maxMany is the most tasks submitMany takes: the largest index a
// submission holds (or the largest int, where that is smaller).
const maxMany = min(math.MaxUint32, math.MaxInt)

func (p *Producer) submitMany(ctx context.Context, tasks []onceq.Task, fn func(int, Receipt, error)) {
	var clk clockReads
	var slots int64 // taken for the tasks still to come
	for i := range tasks {
		t := tasks[i]
		s, err := p.prepare(ctx, &t, &clk, false)
		if err == nil && slots == 0 {
			if slots = p.slots.tryAcquireUpTo(int64(len(tasks) - i)); slots == 0 {
				if err = p.slots.acquire(ctx); err == nil {
					slots = 1
				}
			}
		}
		if err != nil {
			err = p.wrap(&Receipt{ID: t.ID}, err)
			p.m.fail(t.Queue, err)
			fn(i, Receipt{ID: t.ID}, err)
			continue
		}
		slots--
		s.many, s.index, s.id = fn, uint32(i), t.ID
		if p.cfg.records {
			if err := p.recordTask(ctx, s, &t); err != nil {
				p.slots.release(1)
				err = p.wrap(&Receipt{ID: t.ID}, err)
				p.m.fail(t.Queue, err)
				fn(i, Receipt{ID: t.ID}, err)
				continue
			}
		}
		p.sampleMany(s, i)
		s.rec.Context = s
		p.cl.Produce(context.Background(), &s.rec, p.promise)
	}
	if slots > 0 { // taken for tasks refused after all
		p.slots.release(slots)
	}
}

// submit is Submit and SubmitAsync. A synchronous submission with a linger
// produces from a goroutine of its own, with ProduceSync, which sends its
// partition's batch at once instead of waiting out the linger.
func (p *Producer) submit(ctx context.Context, task onceq.Task, fn func(Receipt, error), sync bool) string {
	if fn == nil {
		fn = func(Receipt, error) {}
	}
	if tracing.Traced(ctx) {
		ctx, fn = traceSubmit(ctx, &task, fn)
	}
	var clk clockReads
	s, err := p.prepare(ctx, &task, &clk, false)
	if err == nil {
		err = p.slots.acquire(ctx)
		if err == nil {
			s.fn, s.id = fn, task.ID
			if err = p.record(ctx, s, &task, sync); err != nil {
				p.slots.release(1)
			}
		}
	}
	if err != nil {
		err = p.wrap(&Receipt{ID: task.ID}, err)
		p.m.fail(task.Queue, err)
		fn(Receipt{ID: task.ID}, err)
		return task.ID
	}
	p.sample(s)
	s.rec.Context = s
	if sync && p.cfg.linger > 0 {
		go p.produceSync(s)
		return task.ID
	}
	p.cl.Produce(context.Background(), &s.rec, p.promise)
	return task.ID
}

// record adds a task's pending record, when the producer writes them
// (Records), to its queue's batch (recordTask), or for a Submit that does
// not wait for the linger keeps it in the task's submission, for
// produceSync to write beside the task.
func (p *Producer) record(ctx context.Context, s *submission, t *onceq.Task, sync bool) error {
	switch {
	case !p.cfg.records:
		return nil
	case sync && p.cfg.linger > 0:
		rec, err := p.syncRecord(ctx, s, t)
		if err == nil {
			s.pend = &recordBatch{rec: *rec}
		}
		return err
	}
	return p.recordTask(ctx, s, t)
}

// produceSync writes a task, and its pending record if it has one, at
// once, past the linger, and settles its submission.
func (p *Producer) produceSync(s *submission) {
	recs := []*kgo.Record{&s.rec}
	if s.pend != nil {
		recs = append(recs, &s.pend.rec)
	}
	for _, r := range p.cl.ProduceSync(context.Background(), recs...) {
		if r.Record == &s.rec {
			s.err = r.Err
		} else {
			s.pend.err = r.Err
		}
	}
	p.settled(s)
}

// prepare validates the task, completes it and returns its submission,
// with its record and its queue. clk holds the clock reads of the call. A
// task due now wakes its queue's workers, unless it is part of a
// transaction (tx), which wakes them when it commits.
func (p *Producer) prepare(ctx context.Context, t *onceq.Task, clk *clockReads, tx bool) (*submission, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	if err := t.Validate(p.cfg.maxMessageBytes); err != nil {
		return nil, err
	}
	now, stamp := p.now(t, clk)
	if t.ID == "" {
		id, err := p.ids.next(now)
		if err != nil {
			return nil, fmt.Errorf("generating a task ID: %w", err)
		}
		t.ID, t.GeneratedID = id, true
	}
	if t.MaxAttempts == 0 {
		t.MaxAttempts = p.cfg.defaultMaxAttempts
	}
	if t.Timeout == 0 {
		t.Timeout = p.cfg.defaultTimeout
	}
	if t.Priority == 0 {
		t.Priority = p.cfg.defaultPriority
	}
	t.Resolve(now)
	dest, q, err := p.route(ctx, t, now)
	if err != nil {
		return nil, err
	}
	s := &submission{q: q}
	t.EncodeRecord(&s.rec, dest.name, s.headers[:0], s.values[:0])
	if dest == q && !tx {
		p.wake(ctx, q, now)
	}
	p.notePriority(ctx, q, t)
	s.rec.Timestamp = stamp // saves the client a clock read
	return s, nil
}

// clockReads are the times read for the tasks of one call, each read when
// a task of the call first needs it.
type clockReads struct {
	shared, system time.Time
}

// now returns the time that resolves a task (its Due from a Delay, its
// enqueue time, its ID's time) and the timestamp of its record. A plain
// task takes both from the shared millisecond clock, which may be a
// little behind: its enqueue time and timestamp are then a little early,
// which is harmless. A task with a Delay or a Due reads the system clock,
// so that its Due is never early and its route is right. The Now option
// replaces the time that resolves tasks, not the timestamp.
func (p *Producer) now(t *onceq.Task, clk *clockReads) (now, stamp time.Time) {
	if t.Delay != 0 || !t.Due.IsZero() {
		if clk.system.IsZero() {
			clk.system = time.Now()
		}
		stamp = clk.system
	} else {
		if clk.shared.IsZero() {
			clk.shared = p.clock.now()
		}
		stamp = clk.shared
	}
	if p.cfg.realClock {
		return stamp, stamp
	}
	return p.cfg.now(), stamp
}

// Flush waits until every task submitted so far is acknowledged or
// refused.
func (p *Producer) Flush(ctx context.Context) error {
	if err := p.cl.Flush(ctx); err != nil {
		return fmt.Errorf("producer: flush: %w", err)
	}
	return nil
}

// Close waits up to 30 seconds for buffered tasks (call Flush first to
// choose the wait), fails the rest with ErrClosed, waits for a running Tx
// and releases the connections. Submitting after Close fails with
// ErrClosed. Close is idempotent.
func (p *Producer) Close() {
	if p.closed.Swap(true) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeFlushTimeout)
	if err := p.cl.Flush(ctx); err != nil {
		p.cfg.log.Warn("closing with unacknowledged tasks: they fail with ErrClosed", "err", err)
	}
	cancel()
	p.cl.Close()
	p.clock.close()
	p.txMu.Lock()
	if p.txcl != nil {
		p.txcl.Close()
		p.txcl = nil
	}
	p.txMu.Unlock()
	if p.adm != nil {
		p.adm.Close()
	}
}

// wrap turns an error from below into the producer's: prefixed, naming
// the task, still matching the kinds it wraps.
func (p *Producer) wrap(rc *Receipt, err error) error {
	var oe *onceq.Error
	switch {
	case errors.Is(err, ErrClosed), errors.Is(err, kgo.ErrClientClosed):
		return ErrClosed
	case errors.As(err, &oe):
		return &taskError{err: err}
	case errors.Is(err, ErrQueueNotFound):
		return err
	case rc.Topic != "":
		return fmt.Errorf("producer: task %s to %s: %w", rc.ID, rc.Topic, err)
	case rc.ID != "":
		return fmt.Errorf("producer: task %s: %w", rc.ID, err)
	}
	return fmt.Errorf("producer: %w", err)
}

// taskError is an invalid task: the onceq error, prefixed "producer:".
type taskError struct{ err error }

func (e *taskError) Error() string {
	s := e.err.Error()
	if len(s) > 7 && s[:7] == "onceq: " {
		s = s[7:]
	}
	return "producer: " + s
}

func (e *taskError) Unwrap() error { return e.err }

// reason classifies an error for onceq_submit_errors_total.
func reason(err error) string {
	var oe *onceq.Error
	switch {
	case errors.As(err, &oe), errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return "invalid"
	case errors.Is(err, ErrQueueNotFound):
		return "no_queue"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case errors.Is(err, ErrClosed):
		return "closed"
	}
	return "broker"
}
