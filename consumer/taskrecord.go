package consumer

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
)

// taskOutcome is what a result's task record says, beside what the result
// already holds (its ID, time and queue).
type taskOutcome struct {
	state   onceq.TaskState // "": the result writes no task record
	task    *onceq.Task     // nil for a record that could not be decoded
	started time.Time       // of the handler's run
	due     time.Time       // of a retry, or of a task held in the delay buckets
	reason  string          // of a dead, expired or canceled task
	err     string          // the handler's error, or why the task is dead
	value   []byte          // what the handler returned
}

// addTaskRecord appends the result's task record to its outputs, so that
// it commits in the result's transaction like the outputs it describes,
// and shares their fate when the brokers refuse one.
func (w *Worker) addTaskRecord(ps *partState, res *result) {
	if !w.cfg.taskRecords || res.rec.state == "" || res.src == nil {
		return
	}
	o := &res.rec
	// The queue is the topic the task came from, whose records topic the
	// worker made at its start, whatever the task's headers say.
	tr := onceq.TaskRecord{ID: res.id, Queue: res.src.Topic, State: o.state, Worker: w.instanceID,
		Reason: o.reason, Error: onceq.CutError(o.err), Partition: res.src.Partition, Offset: res.src.Offset}
	if t := o.task; t != nil {
		tr.ID, tr.Attempt, tr.MaxAttempts, tr.Enqueued = t.ID, t.Attempt, t.MaxAttempts, t.Enqueued
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
	res.outputs = append(res.outputs, newRecordOut(ps.recordsTopic, &tr, res.src))
}

// recordOut is a task record's Kafka record with room for its usual
// value: one allocation instead of three, since every task writes one.
type recordOut struct {
	rec kgo.Record
	buf [320]byte
}

// newRecordOut encodes tr for topic, the records topic of src's queue.
// The key shares the bytes of src's onceq-id when it is the ID (headers
// are never changed).
func newRecordOut(topic string, tr *onceq.TaskRecord, src *kgo.Record) *kgo.Record {
	o := &recordOut{}
	o.rec.Topic = topic
	for _, h := range src.Headers {
		if h.Key == onceq.HeaderID && string(h.Value) == tr.ID {
			o.rec.Key = h.Value
			break
		}
	}
	if o.rec.Key == nil {
		o.rec.Key = []byte(tr.ID)
	}
	o.rec.Value = tr.AppendJSON(o.buf[:0])
	return &o.rec
}

// recordsTopicConfigs are the configs of a records topic the worker
// creates: kept for the result retention, or the dedup window if longer.
func (w *Worker) recordsTopicConfigs() map[string]string {
	return broker.RecordsTopicConfigs(max(w.cfg.resultRetention, w.cfg.dedupWindow))
}
