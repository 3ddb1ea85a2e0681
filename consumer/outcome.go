package consumer

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
)

// Outcomes of a task, as counted in onceq_tasks_processed_total.
const (
	outcomeSuccess   = "success"
	outcomeDuplicate = "duplicate"
	outcomeRetried   = "retried"
	outcomeDead      = "dead"
	outcomeExpired   = "expired"
)

// Reasons of dead letters, as counted in onceq_dead_letters_total.
const (
	reasonFailed      = "failed"       // SkipRetry
	reasonMaxAttempts = "max_attempts" // failed on its last attempt
	reasonExpired     = "expired"
	reasonMalformed   = "malformed"
)

// success turns a handled task into its result: outputs as records, state
// writes, the processed-ID mark.
func (w *Worker) success(t *Task, key string) (*result, error) {
	now := time.Now()
	res := &result{id: key, at: now, writes: t.state.writes, outcome: outcomeSuccess}
	for i := range t.emits {
		out := &t.emits[i]
		out.Resolve(now)
		rec, err := w.route(out, now)
		if err != nil {
			return nil, err
		}
		res.outputs = append(res.outputs, rec)
	}
	return res, nil
}

// route encodes a task for its queue, or for a delay bucket when it is due
// later, making sure the topic exists.
func (w *Worker) route(t *onceq.Task, now time.Time) (*kgo.Record, error) {
	topic := t.Queue
	if t.DelayedAt(now) {
		topic = w.cfg.planner.Route(now, t.Due).Topic
	}
	if err := w.topics.ensure(topic); err != nil {
		return nil, fmt.Errorf("consumer: writing to %s: %w", topic, err)
	}
	return t.Record(topic), nil
}

// failure turns a failed run into a retry through the delay buckets, or a
// dead letter after the last attempt or a SkipRetry. The retry record is
// committed with this run's offset, so a retry is scheduled exactly once.
func (w *Worker) failure(task *onceq.Task, key string, herr error) (*result, error) {
	w.metrics.failed.WithLabelValues(task.Queue).Inc()
	now := time.Now()
	if IsSkipRetry(herr) {
		return w.deadLetter(task, key, reasonFailed, herr.Error(), now)
	}
	maxAttempts := task.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = w.cfg.maxAttempts
	}
	if task.Attempt >= maxAttempts {
		return w.deadLetter(task, key, reasonMaxAttempts, "attempt "+strconv.Itoa(task.Attempt)+" of "+strconv.Itoa(maxAttempts)+": "+herr.Error(), now)
	}
	delay, asked := RetryDelay(herr)
	if !asked {
		b := task.Backoff
		if b.IsZero() {
			b = w.cfg.backoff
		}
		delay = b.Delay(task.Attempt)
		delay += time.Duration(rand.Float64() * w.cfg.jitter * float64(delay))
	}
	retry := task.Clone()
	retry.Attempt++
	retry.LastError = onceq.CutError(herr.Error())
	retry.Due = now.Add(delay).Add(time.Millisecond - 1).Truncate(time.Millisecond) // never before its backoff
	rec, err := w.route(&retry, now)
	if err != nil {
		return nil, err
	}
	w.cfg.log.Debug("task failed; retry scheduled", "id", task.ID, "attempt", task.Attempt, "retry_in", delay, "err", herr)
	return &result{id: key, at: now, outcome: outcomeRetried, outputs: []*kgo.Record{rec}}, nil
}

// deadLetter writes the task to its queue's dead letters with every
// original header, the reason in onceq-error and the failure time in
// onceq-failed; the result marks the run processed.
func (w *Worker) deadLetter(task *onceq.Task, key, reason, text string, now time.Time) (*result, error) {
	dlq := broker.DLQTopic(task.Queue)
	if err := w.topics.ensure(dlq); err != nil {
		return nil, fmt.Errorf("consumer: creating dead-letter topic %s: %w", dlq, err)
	}
	dead := task.Clone()
	dead.LastError = onceq.CutError(reason + ": " + text)
	dead.Failed = now
	w.metrics.dead.WithLabelValues(task.Queue, reason).Inc()
	return &result{id: key, at: now, outcome: outcomeDead, outputs: []*kgo.Record{dead.Record(dlq)}}, nil
}

// deadLetterRaw dead-letters a record whose onceq headers cannot be
// decoded, as it is, with the reason added.
func (w *Worker) deadLetterRaw(r *kgo.Record, id string, cause error) (*result, error) {
	dlq := broker.DLQTopic(r.Topic)
	if err := w.topics.ensure(dlq); err != nil {
		return nil, fmt.Errorf("consumer: creating dead-letter topic %s: %w", dlq, err)
	}
	hs := make([]kgo.RecordHeader, 0, len(r.Headers)+2)
	for _, h := range r.Headers {
		if h.Key != onceq.HeaderError && h.Key != onceq.HeaderFailed {
			hs = append(hs, h)
		}
	}
	now := time.Now()
	hs = append(hs,
		kgo.RecordHeader{Key: onceq.HeaderError, Value: []byte(onceq.CutError(reasonMalformed + ": " + cause.Error()))},
		kgo.RecordHeader{Key: onceq.HeaderFailed, Value: []byte(strconv.FormatInt(now.UnixMilli(), 10))})
	w.metrics.dead.WithLabelValues(r.Topic, reasonMalformed).Inc()
	return &result{id: id, at: now, outcome: outcomeDead, outputs: []*kgo.Record{{Topic: dlq, Key: r.Key, Value: r.Value, Headers: hs}}}, nil
}
