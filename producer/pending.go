package producer

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
)

// SubmitPending submits a task as Submit does and, in the same
// transaction, records it in its queue's task records
// (broker.RecordsTopic) as pending, or as scheduled with its due time when
// it is delayed: a reader of the records (package inspect) knows the task
// from the moment the transaction commits, before any worker ran it. A
// task without an ID gets a generated one, as with Submit; Receipts tells
// it.
//
// The record carries no Worker: it is the producer's, and readers never
// let it replace a record a worker wrote for the same ID, so a duplicate
// submitted after the task ran does not make it look pending again. Its
// Partition is the queue's partition the task is written to (or, delayed,
// moved to when due): its key's; its Offset is 0, since no run of it has
// a queue record yet. The
// records topic is created if it does not exist yet, with the queue's
// partitions (broker.RecordsSpec), and is made to keep records at least
// broker.DefaultRecordsRetention.
func (tx *Tx) SubmitPending(task onceq.Task) error {
	now := time.Now()
	if task.ID == "" {
		id, err := tx.p.ids.next(now)
		if err != nil {
			return fmt.Errorf("producer: generating a task ID: %w", err)
		}
		task.ID, task.GeneratedID = id, true
	}
	// Resolved here, the task is what Submit writes (it resolves it again
	// to the same), and the record tells its due and enqueue times.
	if err := task.Validate(tx.p.cfg.maxMessageBytes); err != nil {
		return tx.p.wrap(&Receipt{ID: task.ID}, err)
	}
	if task.MaxAttempts == 0 {
		task.MaxAttempts = tx.p.cfg.defaultMaxAttempts
	}
	if task.Priority == 0 {
		task.Priority = tx.p.cfg.defaultPriority
	}
	task.Resolve(now)
	if err := tx.Submit(task); err != nil {
		return err
	}
	queue := onceq.QueueTopic(task.Queue)
	topic, parts, err := tx.p.recordsTopic(tx.ctx, queue)
	if err != nil {
		return fmt.Errorf("producer: task %s: %w", task.ID, err)
	}
	tr := onceq.TaskRecord{ID: task.ID, Queue: task.Queue, State: onceq.StatePending, MaxAttempts: task.MaxAttempts, Priority: task.Priority,
		Enqueued: task.Enqueued, Partition: broker.KeyPartition(task.PartitionKey(), parts)}
	if task.DelayedAt(now) {
		tr.State, tr.Due = onceq.StateScheduled, task.Due
	}
	// Keyed by the task's ID within its queue, as its task is when it has
	// no key of its own: a lane's queues spread over its partitions.
	id := onceq.Task{Queue: task.Queue, ID: task.ID}
	rec := &kgo.Record{Topic: topic, Key: id.PartitionKey(), Value: tr.AppendJSON(nil)}
	tx.cl.Produce(tx.ctx, rec, func(_ *kgo.Record, err error) {
		if err != nil {
			tx.mu.Lock()
			if tx.err == nil {
				tx.err = fmt.Errorf("producer: task %s: recording it as %s: %w", task.ID, tr.State, err)
			}
			tx.mu.Unlock()
		}
	})
	return nil
}

// recordsTopic returns the records topic of queue, creating it with the
// queue's partition count the first time if no worker has yet, and that
// count.
func (p *Producer) recordsTopic(ctx context.Context, queue string) (string, int, error) {
	v, ok := p.topics.Load(queue)
	if !ok {
		return "", 0, fmt.Errorf("queue %q not looked up", queue)
	}
	s := v.(*topicState)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.records != "" {
		return s.records, s.parts, nil
	}
	adm, err := p.admin()
	if err != nil {
		return "", 0, err
	}
	info, err := adm.DescribeTopic(ctx, queue)
	if err != nil {
		return "", 0, err
	}
	spec := broker.RecordsSpec(queue, int32(len(info.Partitions)), broker.DefaultRecordsRetention)
	if _, err := adm.EnsureTopics(ctx, []broker.TopicSpec{spec}); err != nil {
		return "", 0, fmt.Errorf("creating the task records topic %s: %w", spec.Name, err)
	}
	s.records, s.parts = spec.Name, len(info.Partitions)
	return spec.Name, s.parts, nil
}
