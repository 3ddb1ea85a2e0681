package consumer

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
)

// taskOutcome is what a result's task record says, beside what the result
// already holds (its ID, time and queue).
type taskOutcome struct {
	state   onceq.TaskState // "": the result writes no task record
	task    taskFacts       // zero for a record that could not be decoded
	started time.Time       // of the handler's run
	due     time.Time       // of a retry, or of a task held in the delay buckets
	reason  string          // of a dead, expired or canceled task
	err     string          // the handler's error, or why the task is dead
	value   []byte          // what the handler returned
}

// taskFacts are the fields of a task that its record reads. A result keeps
// these rather than the task: a pointer kept every finished task, some
// 600 bytes with its headers, alive until its commit, tens of thousands
// of them at full speed.
type taskFacts struct {
	ok                   bool // the task was decoded
	id, queue            string
	attempt, maxAttempts int
	priority             int
	enqueued             time.Time
}

func factsOf(t *onceq.Task) taskFacts {
	return taskFacts{ok: true, id: t.ID, queue: t.Queue, attempt: t.Attempt, maxAttempts: t.MaxAttempts, priority: t.Priority, enqueued: t.Enqueued}
}

// taskRecord is the result's task record; ok is false when it writes
// none.
func (w *Worker) taskRecord(res *result) (tr onceq.TaskRecord, ok bool) {
	if !w.cfg.taskRecords || res.rec.state == "" || res.src == nil {
		return tr, false
	}
	o := &res.rec
	// The queue is the topic the task came from, whose records topic the
	// worker made at its start, or a lane queue of it (the worker checked
	// that the task's header names one: attempt).
	tr = onceq.TaskRecord{ID: res.id, Queue: res.src.Topic, State: o.state, Worker: w.instanceID,
		Reason: o.reason, Error: onceq.CutError(o.err), Partition: res.src.Partition, Offset: res.src.Offset}
	if t := o.task; t.ok {
		tr.ID, tr.Attempt, tr.MaxAttempts, tr.Priority, tr.Enqueued = t.id, t.attempt, t.maxAttempts, t.priority, t.enqueued
		if onceq.QueueTopic(t.queue) == res.src.Topic {
			tr.Queue = t.queue
		}
	}
	if o.state.Final() {
		tr.Started, tr.Finished = o.started, res.at
	} else {
		tr.Started, tr.Due = o.started, o.due
		if o.state == onceq.StateRetrying {
			tr.Finished = res.at
		}
	}
	if o.value != nil && w.cfg.resultRetention > 0 {
		tr.Result = o.value
	}
	return tr, true
}

// maxRecordBatch bounds a record batch's value: well below any broker's
// message size limit, and big enough that a commit writes a few.
const maxRecordBatch = 256 << 10

// lineBatch gathers task records, as JSON lines, into the values of
// Kafka records of one topic and key, each within limit bytes (but for a
// line longer than it, alone): the worker writes task records so, a few
// Kafka records a commit.
type lineBatch struct {
	topic string
	key   []byte
	limit int
	hint  int // bytes to allocate for a value, within limit
	buf   []byte
}

// recordBatch is a lineBatch for topic and key within the worker's
// limit, whose values start with room for hint bytes.
func (w *Worker) recordBatch(topic string, key []byte, hint int) *lineBatch {
	limit := min(maxRecordBatch, w.cfg.maxMessageBytes/2)
	return &lineBatch{topic: topic, key: key, limit: limit, hint: min(limit, hint)}
}

// add appends tr's line, first appending to recs the value gathered so
// far if the line would take it past the limit.
func (b *lineBatch) add(recs []*kgo.Record, tr *onceq.TaskRecord) []*kgo.Record {
	size := tr.JSONSize() + 1
	if len(b.buf) > 0 && len(b.buf)+size > b.limit {
		recs = b.flush(recs)
	}
	if b.buf == nil {
		b.buf = make([]byte, 0, max(size, b.hint))
	}
	b.buf = append(tr.AppendJSON(b.buf), '\n')
	return recs
}

// flush appends the value gathered, if any, to recs.
func (b *lineBatch) flush(recs []*kgo.Record) []*kgo.Record {
	if len(b.buf) > 0 {
		recs = append(recs, &kgo.Record{Topic: b.topic, Key: b.key, Value: b.buf})
		b.buf = nil
	}
	return recs
}

// appendRecordBatches appends a partition's share of a commit's task
// records (one per result that writes one), in the commit's transaction
// with the outputs they describe: one Kafka record of JSON lines, or a
// few when they are many, keyed by the queue partition, so that every
// transition of a task, which runs in one partition, lands in one records
// partition in order. The records are encoded here, straight into the
// batch. They belong to no one result: appended after every partition's
// outputs and changelog records, they are none of pending.owner's.
func (w *Worker) appendRecordBatches(recs []*kgo.Record, ps *partState, res []*result) []*kgo.Record {
	// Room for every record of a partition's usual commit (about 200
	// bytes each).
	b := w.recordBatch(ps.recordsTopic, ps.recordsKey, len(res)*256)
	for _, r := range res {
		if tr, ok := w.taskRecord(r); ok {
			recs = b.add(recs, &tr)
		}
	}
	return b.flush(recs)
}

// recordsRetention is how long the worker needs its records topics to
// keep records: the result retention, or the dedup window if longer.
func (w *Worker) recordsRetention() time.Duration {
	return max(w.cfg.resultRetention, w.cfg.dedupWindow)
}

// recordEmitted keeps in res the pending record of t, a task the run
// emits (or a workflow's next step), routed at now, when the worker writes
// task records: the commit writes it to the task's queue's records topic
// (appendEmittedBatches), so that readers know the task from the commit
// that writes it, pending or scheduled, before any worker ran it, and a
// cancel finds it. The records topic is created, with the queue's
// partitions, when no worker of that queue has yet.
func (w *Worker) recordEmitted(res *result, t *onceq.Task, now time.Time) error {
	if !w.cfg.taskRecords || w.topics == nil {
		return nil
	}
	queue := onceq.QueueTopic(t.Queue)
	n, err := w.topics.ensureRecords(queue, w.recordsRetention())
	if err != nil {
		return fmt.Errorf("consumer: recording task %q of %s: %w", t.ID, t.Queue, err)
	}
	res.emitted = append(res.emitted, t.PendingRecord(t.DelayedAt(now), broker.KeyPartition(t.PartitionKey(), int(n))))
	return nil
}

// appendEmittedBatches appends the pending records of the tasks a commit's
// results emitted, as JSON lines, one Kafka record per records topic (or
// a few, when they are many), in the commit's transaction with the tasks
// they describe. Appended after every partition's outputs and changelog
// records, they are none of pending.owner's, as the results' own records.
func (w *Worker) appendEmittedBatches(recs []*kgo.Record, parts []pending) []*kgo.Record {
	var batches map[string]*lineBatch
	var order []string
	for _, p := range parts {
		for _, r := range p.results {
			for i := range r.emitted {
				tr := &r.emitted[i]
				topic := broker.RecordsTopic(onceq.QueueTopic(tr.Queue))
				b, ok := batches[topic]
				if !ok {
					if batches == nil {
						batches = map[string]*lineBatch{}
					}
					b = w.recordBatch(topic, nil, 0)
					batches[topic] = b
					order = append(order, topic)
				}
				recs = b.add(recs, tr)
			}
		}
	}
	for _, topic := range order {
		recs = batches[topic].flush(recs)
	}
	return recs
}
