package producer

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
)

// A task's record from its submission (the Records option).
//
// Every task the producer writes is recorded in its queue's task records
// topic (broker.RecordsTopic), pending or scheduled, before its
// submission returns or its callback runs: a reader of the records
// (package inspect, onceq task get, queue stats, the console) knows it
// from then on, and a cancel finds it, before any worker has run it.
//
// The records are JSON lines, as a worker writes them (onceq.TaskRecord):
//   - A Submit that does not wait for the linger writes its task's line as
//     a record of its own, beside the task, in one round trip.
//   - SubmitAsync and SubmitMany add their tasks' lines to their queue's
//     open batch. A batch is sent at once when none of its records topic
//     is in flight, and otherwise when the one in flight is acknowledged
//     or the batch is full, so that under load a batch holds what came
//     during a round trip and costs a Kafka record per few thousand
//     tasks. A task's callback runs once both its task and its line are
//     acknowledged.
//   - A Tx adds its tasks' lines to batches of its own, written in the
//     transaction before it commits: the tasks and their records become
//     visible together.
//
// The records are not in the task's transaction outside Tx: a producer
// that dies between the two writes leaves a task without its record
// (recorded when a worker runs it, as without Records) or, rarely, a
// record of a task whose write failed, which Submit reports.

// recordBatchBytes bounds a batch of pending records: the worker's bound
// (maxRecordBatch), and at most half the largest message.
const recordBatchBytes = 256 << 10

// recordsState is what the producer knows of a queue's records topic, and
// its batch of pending records being filled.
type recordsState struct {
	topic string
	parts int // the queue's partitions: a record names its task's
	limit int // bytes of a batch

	mu       sync.Mutex
	open     *recordBatch // being filled; nil when none
	inflight int          // batches sent and not yet acknowledged
	// last is the size of the last batch sent, in bytes and tasks: a
	// new batch is made that large (and a quarter), so that it is not
	// copied as it grows.
	lastBytes, lastTasks int
}

// recordBatch is a Kafka record of pending records and the submissions
// whose lines it holds.
type recordBatch struct {
	rec  kgo.Record
	subs []*submission
	err  error // the brokers' answer, set before any sub is settled
}

// records returns the state of q's records topic, creating the topic
// the first time if no worker or producer has: with the queue's
// partitions (broker.RecordsSpec), keeping records at least
// broker.DefaultRecordsRetention.
func (p *Producer) records(ctx context.Context, q *topicState) (*recordsState, error) {
	if rs := q.recs.Load(); rs != nil {
		return rs, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if rs := q.recs.Load(); rs != nil {
		return rs, nil
	}
	adm, err := p.admin()
	if err != nil {
		return nil, err
	}
	info, err := adm.DescribeTopic(ctx, q.name)
	if err != nil {
		return nil, err
	}
	spec := broker.RecordsSpec(q.name, int32(len(info.Partitions)), broker.DefaultRecordsRetention)
	if _, err := adm.EnsureTopics(ctx, []broker.TopicSpec{spec}); err != nil {
		return nil, fmt.Errorf("creating the task records topic %s, which records the tasks of %s from their submission "+
			"(start a worker of the queue first, which creates it, or turn records off: producer.Records(false), onceq produce --records=false): %w",
			spec.Name, q.name, err)
	}
	rs := &recordsState{topic: spec.Name, parts: len(info.Partitions), limit: min(recordBatchBytes, p.cfg.maxMessageBytes/2)}
	q.recs.Store(rs)
	return rs, nil
}

// pendingRecord is the record of a task the producer just resolved and
// routed (submission s) in its queue's records topic rs.
func pendingRecord(t *onceq.Task, s *submission, rs *recordsState) onceq.TaskRecord {
	// The task's record has its PartitionKey, delayed or not.
	return t.PendingRecord(s.rec.Topic != s.q.name, broker.KeyPartition(s.rec.Key, rs.parts))
}

// recordTask adds the pending record of the prepared task t (submission
// s) to its queue's open batch, and sends the batch if no other is in
// flight or it is full. s's callback then waits for both
// acknowledgments (settle).
func (p *Producer) recordTask(ctx context.Context, s *submission, t *onceq.Task) error {
	rs, err := p.records(ctx, s.q)
	if err != nil {
		return err
	}
	tr := pendingRecord(t, s, rs)
	s.left.Store(2)
	rs.mu.Lock()
	b := rs.open
	if b == nil {
		b = &recordBatch{rec: kgo.Record{Topic: rs.topic, Value: make([]byte, 0, min(rs.limit+rs.limit/4, max(1<<10, rs.lastBytes+rs.lastBytes/4)))},
			subs: make([]*submission, 0, max(4, rs.lastTasks+rs.lastTasks/4))}
		rs.open = b
	}
	b.rec.Value = append(tr.AppendJSON(b.rec.Value), '\n')
	b.subs = append(b.subs, s)
	s.pend = b
	send := rs.inflight == 0 || len(b.rec.Value) >= rs.limit
	if send {
		rs.open = nil
		rs.inflight++
		rs.lastBytes, rs.lastTasks = len(b.rec.Value), len(b.subs)
	}
	rs.mu.Unlock()
	if send {
		p.sendRecords(rs, b)
	}
	return nil
}

// sendRecords produces a batch of pending records. It may run on the
// client's callback goroutine (recorded), where Produce must not block:
// the client's buffer has room for every task and a batch of each
// (clientOpts), so TryProduce fails only if that bound is ever wrong,
// and the batch then waits in a goroutine of its own.
func (p *Producer) sendRecords(rs *recordsState, b *recordBatch) {
	promise := func(_ *kgo.Record, err error) { p.recorded(rs, b, err) }
	p.cl.TryProduce(context.Background(), &b.rec, func(r *kgo.Record, err error) {
		if errors.Is(err, kgo.ErrMaxBuffered) {
			go p.cl.Produce(context.Background(), r, promise)
			return
		}
		promise(r, err)
	})
}

// recorded settles the submissions of an acknowledged batch and sends
// the batch filled meanwhile, if any.
func (p *Producer) recorded(rs *recordsState, b *recordBatch, err error) {
	rs.mu.Lock()
	rs.inflight--
	next := rs.open
	if next != nil && rs.inflight == 0 {
		rs.open = nil
		rs.inflight++
		rs.lastBytes, rs.lastTasks = len(next.rec.Value), len(next.subs)
	} else {
		next = nil
	}
	rs.mu.Unlock()
	if next != nil {
		p.sendRecords(rs, next)
	}
	b.err = err
	for _, s := range b.subs {
		if s.left.Add(-1) == 0 {
			p.settled(s)
		}
	}
}

// settled calls the callback of a submission whose acknowledgments all
// came: the task's, and its record's if it has one.
func (p *Producer) settled(s *submission) {
	rc, err := p.acked(s, s.err)
	if s.many != nil {
		s.many(int(s.index), rc, err)
		return
	}
	s.fn(rc, err)
}

// errNotRecorded wraps the error of a pending record the brokers refused
// although its task was written.
var errNotRecorded = errors.New("written, but its pending record was not: it runs, but no reader knows it until a worker records it")

// syncRecord is the record, of its own, of the pending record of a task
// Submit writes without waiting for the linger.
func (p *Producer) syncRecord(ctx context.Context, s *submission, t *onceq.Task) (*kgo.Record, error) {
	rs, err := p.records(ctx, s.q)
	if err != nil {
		return nil, err
	}
	tr := pendingRecord(t, s, rs)
	return &kgo.Record{Topic: rs.topic, Key: []byte(t.ID), Value: tr.AppendJSON(nil)}, nil
}

// txRecords are the pending records of a Tx's tasks, a batch per
// records topic, written just before the transaction commits.
type txRecords struct {
	mu      sync.Mutex
	batches map[*recordsState][]byte
	order   []*recordsState
}

// add appends a task's record to its topic's batch, handing back a full
// batch to produce.
func (r *txRecords) add(rs *recordsState, tr *onceq.TaskRecord) (full []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.batches == nil {
		r.batches = map[*recordsState][]byte{}
	}
	b, ok := r.batches[rs]
	if !ok {
		r.order = append(r.order, rs)
	}
	if len(b) > 0 && len(b)+tr.JSONSize() > rs.limit {
		full, b = b, nil
	}
	r.batches[rs] = append(tr.AppendJSON(b), '\n')
	return full
}

// take returns the batches not yet produced, and forgets them.
func (r *txRecords) take() []*kgo.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var recs []*kgo.Record
	for _, rs := range r.order {
		if b := r.batches[rs]; len(b) > 0 {
			recs = append(recs, &kgo.Record{Topic: rs.topic, Value: b})
		}
	}
	r.batches, r.order = nil, nil
	return recs
}

// SubmitPending submits a task as Submit does and, in the same
// transaction, records it in its queue's task records
// (broker.RecordsTopic) as pending, or as scheduled with its due time when
// it is delayed, whether the producer records its tasks (Records) or not:
// a reader of the records (package inspect) knows the task from the
// moment the transaction commits, before any worker ran it. A task
// without an ID gets a generated one, as with Submit; Receipts tells it.
//
// The record carries no Worker: it is the producer's, and readers never
// let it replace a record a worker wrote for the same ID, so a duplicate
// submitted after the task ran does not make it look pending again. Its
// Partition is the queue's partition the task is written to (or, delayed,
// moved to when due): its key's; its Offset is 0, since no run of it has
// a queue record yet. The records topic is created if it does not exist
// yet, with the queue's partitions (broker.RecordsSpec), and is made to
// keep records at least broker.DefaultRecordsRetention.
func (tx *Tx) SubmitPending(task onceq.Task) error {
	return tx.submit(task, true)
}
