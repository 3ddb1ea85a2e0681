package producer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/tracing"
)

// endTxTimeout bounds committing or aborting a transaction. Ending one is
// never tied to the caller's context: a commit canceled half way leaves
// its outcome unknown, so the decision to commit is taken on ctx and the
// commit itself then runs to its end.
const endTxTimeout = 30 * time.Second

// ErrTxAborted is returned by Producer.Tx when the transaction was asked
// to commit but aborted: none of its tasks is visible to read_committed
// consumers, and running it again is safe.
var ErrTxAborted = errors.New("producer: the transaction aborted instead of committing")

// errTxEnded is returned by Tx.Submit after fn returned.
var errTxEnded = errors.New("producer: Tx.Submit after the transaction ended: submit only inside fn")

// Tx is one transaction: every task submitted through it becomes visible
// to read_committed consumers when it commits, all at once, or never.
// Submit and Receipts are safe for concurrent use inside the function
// given to Producer.Tx, and must not be called after it returns.
type Tx struct {
	p   *Producer
	cl  *kgo.Client
	ctx context.Context

	recs txRecords // its tasks' pending records, written at its end

	mu       sync.Mutex
	receipts []Receipt
	queues   []*topicState // queues[i] is the queue of receipts[i]
	err      error         // the first task the brokers refused
	ended    bool
}

// Tx runs fn in a transaction. If fn returns nil and ctx is not done, the
// tasks fn submitted commit together; if fn returns an error or panics, a
// task is refused, or ctx ends first, the transaction aborts and none of
// them is ever visible to read_committed consumers (plain read_uncommitted
// Kafka consumers do see aborted records; onceq's workers read committed).
// A producer that crashes inside Tx leaves the transaction to the broker,
// which aborts it after TxTimeout.
//
// One Tx runs at a time per producer; others wait. Tasks submitted with
// Submit or SubmitAsync meanwhile are not part of it. The transactional
// client is created by the first Tx and recreated after a transaction
// that could not be aborted.
//
// fn can run more than once: when a transaction asked to commit aborts
// instead (ErrTxAborted: franz-go does so when the transaction's only
// writes went to queues new to the client, on a race that broker.TxLogger
// tells), or a broker refused one of its writes as out of sequence, Tx
// runs fn again in a new transaction, up to txTries times in all. The
// tasks of a run that aborted are never visible.
func (p *Producer) Tx(ctx context.Context, fn func(*Tx) error) (err error) {
	for try := 1; ; try++ {
		err = p.txOnce(ctx, fn)
		if try == txTries || !errors.Is(err, ErrTxAborted) || ctx.Err() != nil {
			return err
		}
		p.cfg.log.Warn("transaction aborted instead of committing: running it again", "try", try, "err", err)
	}
}

// SubmitAll submits tasks in one transaction (see Tx): every one of them
// becomes visible to workers when it commits, or none ever does. It
// returns once the transaction committed; use Tx for the receipts.
func (p *Producer) SubmitAll(ctx context.Context, tasks []onceq.Task) error {
	return p.Tx(ctx, func(tx *Tx) error {
		for i := range tasks {
			if err := tx.Submit(tasks[i]); err != nil {
				return err
			}
		}
		_, err := tx.Receipts(ctx)
		return err
	})
}

// txTries bounds the runs of one Tx.
const txTries = 3

// txOnce runs fn in one transaction.
func (p *Producer) txOnce(ctx context.Context, fn func(*Tx) error) (err error) {
	if p.closed.Load() {
		return ErrClosed
	}
	p.txMu.Lock()
	defer p.txMu.Unlock()
	cl, err := p.txClient()
	if err != nil {
		return err
	}
	if err := cl.BeginTransaction(); err != nil {
		p.dropTxClient()
		return fmt.Errorf("producer: beginning a transaction: %w", err)
	}
	if tracing.Traced(ctx) {
		var end func(error)
		ctx, end = traceTx(ctx)
		defer func() { end(err) }()
	}
	tx := &Tx{p: p, cl: cl, ctx: ctx}
	start := time.Now()
	committed := false
	defer func() {
		tx.mu.Lock()
		tx.ended = true
		tx.mu.Unlock()
		if !committed {
			if p.txcl == cl { // else commitTx dropped it
				p.abortTx(cl)
			}
			tx.count(false, start)
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := p.commitTx(ctx, tx); err != nil {
		return err
	}
	committed = true
	tx.count(true, start)
	tx.wake(ctx)
	return nil
}

// wake wakes the workers of the queues the committed transaction wrote
// tasks to now (not of those whose tasks it delayed).
func (tx *Tx) wake(ctx context.Context) {
	now := time.Now()
	tx.mu.Lock()
	defer tx.mu.Unlock()
	for i, q := range tx.queues {
		if !tx.receipts[i].Delayed {
			tx.p.wake(ctx, q, now)
		}
	}
}

// commitTx flushes the transaction's tasks and commits them, unless one
// was refused or ctx ended. p.txMu is held.
func (p *Producer) commitTx(ctx context.Context, tx *Tx) error {
	tx.produceRecords(tx.recs.take())
	if err := tx.cl.Flush(ctx); err != nil {
		return fmt.Errorf("producer: transaction not committed: %w", err)
	}
	tx.mu.Lock()
	err := tx.err
	tx.mu.Unlock()
	if errors.Is(err, kerr.OutOfOrderSequenceNumber) {
		// The client's sequence numbers no longer match the broker's, and
		// every later transaction of it would be refused the same: a new
		// client's initialization fences this one's transaction and starts
		// its sequences over. Nothing of this one is visible.
		p.dropTxClient()
		return fmt.Errorf("%w: %w", ErrTxAborted, err)
	}
	if err != nil {
		return fmt.Errorf("producer: transaction not committed: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("producer: transaction not committed: %w", err)
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTxTimeout)
	defer cancel()
	p.txUnasked.Store(false)
	if err := tx.cl.EndTransaction(ectx, kgo.TryCommit); err != nil {
		return fmt.Errorf("producer: committing the transaction: %w", err)
	}
	if p.txUnasked.Load() {
		// The client's bookkeeping no longer matches the broker's (its
		// sequence numbers ran past the abort, and the next transaction
		// would fail OUT_OF_ORDER_SEQUENCE_NUMBER): a new client's
		// initialization starts clean.
		p.dropTxClient()
		return fmt.Errorf("%w: franz-go found no partition added to it although its tasks were written, and aborted it; nothing is visible, run it again", ErrTxAborted)
	}
	return nil
}

// abortTx aborts the open transaction: buffered records fail, and the
// broker writes abort markers for what was written. If that fails, the
// client's state is unknown; it is closed and the next Tx makes a new one,
// whose initialization fences whatever the old one left open.
func (p *Producer) abortTx(cl *kgo.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), endTxTimeout)
	defer cancel()
	err := cl.AbortBufferedRecords(ctx)
	if err == nil {
		err = cl.EndTransaction(ctx, kgo.TryAbort)
	}
	if err != nil {
		p.cfg.log.Warn("aborting a transaction failed: recreating the transactional client", "err", err, "transactional_id", p.cfg.txnID)
		p.dropTxClient()
	}
}

// txClient returns the transactional client, creating it if needed.
// p.txMu is held.
func (p *Producer) txClient() (*kgo.Client, error) {
	if p.txcl != nil {
		return p.txcl, nil
	}
	opts := append(clientOpts(p.cfg),
		kgo.TransactionalID(p.cfg.txnID),
		kgo.TransactionTimeout(p.cfg.txTimeout),
		kgo.MaxBufferedRecords(p.cfg.maxBuffered),
		kgo.WithLogger(broker.TxLogger(p.cfg.log, &p.txUnasked)),
	)
	cl, err := p.cfg.conn.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	p.txcl = cl
	return cl, nil
}

// dropTxClient closes the transactional client. p.txMu is held.
func (p *Producer) dropTxClient() {
	if p.txcl != nil {
		p.txcl.Close()
		p.txcl = nil
	}
}

// Submit adds a task to the transaction. Invalid tasks are refused at once,
// as by Producer.Submit; the transaction goes on unless fn returns the
// error. A task the brokers refuse later makes the commit fail.
func (tx *Tx) Submit(task onceq.Task) error {
	return tx.submit(task, tx.p.cfg.records)
}

// submit is Submit, with the task's pending record when record is set.
func (tx *Tx) submit(task onceq.Task, record bool) error {
	tx.mu.Lock()
	ended := tx.ended
	tx.mu.Unlock()
	if ended {
		return errTxEnded
	}
	if tracing.Traced(tx.ctx) && !tracing.Has(task.Headers) {
		// The transaction's span is every task's submission.
		task.Headers = tracing.Set(tx.ctx, task.Headers)
	}
	s, err := tx.p.prepare(tx.ctx, &task, &clockReads{}, true)
	if err == nil && record {
		err = tx.record(s, &task)
	}
	if err != nil {
		return tx.p.wrap(&Receipt{ID: task.ID}, err)
	}
	tx.mu.Lock()
	i := len(tx.receipts)
	q, topic := s.q, s.rec.Topic
	tx.receipts = append(tx.receipts, Receipt{ID: task.ID, Topic: topic, Partition: -1, Offset: -1, Delayed: topic != q.name})
	tx.queues = append(tx.queues, q)
	tx.mu.Unlock()
	tx.cl.Produce(tx.ctx, &s.rec, func(r *kgo.Record, err error) {
		tx.mu.Lock()
		defer tx.mu.Unlock()
		if err != nil {
			tx.p.noteError(topic, err)
			if tx.err == nil {
				tx.err = tx.p.wrap(&tx.receipts[i], err)
			}
			return
		}
		tx.receipts[i].Partition, tx.receipts[i].Offset = r.Partition, r.Offset
	})
	return nil
}

// record adds the pending record of a prepared task to the transaction's
// batches, writing a batch that is full.
func (tx *Tx) record(s *submission, t *onceq.Task) error {
	rs, err := tx.p.records(tx.ctx, s.q)
	if err != nil {
		return err
	}
	tr := pendingRecord(t, s, rs)
	if full := tx.recs.add(rs, &tr); full != nil {
		tx.produceRecords([]*kgo.Record{{Topic: rs.topic, Value: full}})
	}
	return nil
}

// produceRecords writes batches of pending records in the transaction.
func (tx *Tx) produceRecords(recs []*kgo.Record) {
	for _, r := range recs {
		tx.cl.Produce(tx.ctx, r, func(r *kgo.Record, err error) {
			if err == nil {
				return
			}
			tx.mu.Lock()
			defer tx.mu.Unlock()
			if tx.err == nil {
				tx.err = fmt.Errorf("producer: recording the transaction's tasks in %s: %w", r.Topic, err)
			}
		})
	}
}

// Receipts waits until the brokers acknowledged every task submitted so
// far, and their pending records, and returns their receipts in
// submission order. The tasks are written but invisible to read_committed
// consumers until the transaction commits; the error is the first task
// the brokers refused.
func (tx *Tx) Receipts(ctx context.Context) ([]Receipt, error) {
	tx.produceRecords(tx.recs.take())
	if err := tx.cl.Flush(ctx); err != nil {
		return nil, fmt.Errorf("producer: waiting for the transaction's tasks: %w", err)
	}
	tx.mu.Lock()
	defer tx.mu.Unlock()
	return append([]Receipt(nil), tx.receipts...), tx.err
}

// count records the outcome of the transaction's tasks in the metrics:
// submitted, or refused with reason "aborted".
func (tx *Tx) count(committed bool, start time.Time) {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	d := time.Since(start).Seconds()
	for _, q := range tx.queues {
		if !committed {
			tx.p.m.errors.WithLabelValues(tx.p.m.label(q.name), "aborted").Inc()
			continue
		}
		q.submitted.Inc()
		q.duration.Observe(d)
	}
}
