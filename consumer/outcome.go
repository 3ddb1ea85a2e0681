package consumer

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dlq"
	"github.com/onceq/onceq/internal/ctltopic"
	"github.com/onceq/onceq/internal/flow"
	"github.com/onceq/onceq/internal/tracing"
)

// Outcomes of a task, as counted in onceq_tasks_processed_total.
const (
	outcomeSuccess   = "success"
	outcomeDuplicate = "duplicate"
	outcomeRetried   = "retried"
	outcomeDead      = "dead"
	outcomeExpired   = "expired"
	outcomeForwarded = "forwarded" // to its home partition, or to the delay buckets
	outcomeCanceled  = "canceled"
	outcomeSnoozed   = "snoozed"
	outcomeReleased  = "released" // back in its queue as it came (Release)
	// A task of a lane queue the worker does not consume, on a lane it
	// reads for others: acknowledged without running, as Kafka consumer
	// groups each read all of a topic. The groups that consume its queue
	// run it.
	outcomeOtherQueue = "other-queue"
)

// success turns a handled task into its result: outputs as records, state
// writes, the processed-ID mark.
func (w *Worker) success(t *Task, key string) (*result, error) {
	now := t.ended
	if now.IsZero() {
		now = time.Now()
	}
	res := &result{id: key, at: now, writes: t.state.writes, outcome: outcomeSuccess, queue: t.Queue,
		rec: taskOutcome{state: onceq.StateSucceeded, task: factsOf(&t.Task), started: t.started, value: t.result}}
	for i := range t.emits {
		out := &t.emits[i]
		out.Resolve(now)
		rec, err := w.route(out, now)
		if err == nil {
			err = w.recordEmitted(res, out, now)
		}
		if err != nil {
			return nil, err
		}
		res.outputs = w.notePriority(append(res.outputs, rec), out)
	}
	if err := w.continueFlow(res, &t.Task, t.trace, flow.Succeeded(t.result), now); err != nil {
		return nil, err
	}
	return res, nil
}

// continueFlow appends to res what the end of a workflow's step emits in
// the same transaction (package internal/flow): the next steps, callbacks,
// or its report to its group's join. A task outside workflows emits
// nothing.
//
// The next steps carry the trace of the step's run (run, nil when the run
// was not traced or there was no run), or else the step's own.
func (w *Worker) continueFlow(res *result, task *onceq.Task, run context.Context, o flow.Outcome, now time.Time) error {
	if len(task.Workflow) == 0 {
		return nil
	}
	next, err := flow.FinishTask(task.Workflow, o)
	if err != nil {
		return fmt.Errorf("consumer: task %q: %w", task.ID, err)
	}
	if run == nil {
		run = tracing.Extract(context.Background(), task.Headers)
	}
	for i := range next {
		next[i].Headers = tracing.Set(run, next[i].Headers)
		next[i].Resolve(now)
		rec, err := w.route(&next[i], now)
		if err == nil {
			err = w.recordEmitted(res, &next[i], now)
		}
		if err != nil {
			return err
		}
		res.outputs = w.notePriority(append(res.outputs, rec), &next[i])
	}
	return nil
}

// notePriority appends to outputs the priority note of the topic of t, a
// task the run emits, when t has a priority above 0 and the worker wrote
// none for the topic within ctltopic.PriorityNoteEvery: the workers of
// that queue then read ahead of a backlog for it (lookahead.go). A note
// of a transaction that aborts is not written, and the worker writes the
// next one an interval later: until then, those workers read ahead once
// their fetch meets such a task.
func (w *Worker) notePriority(outputs []*kgo.Record, t *onceq.Task) []*kgo.Record {
	if t.Priority <= 0 {
		return outputs
	}
	topic := onceq.QueueTopic(t.Queue)
	now := time.Now()
	v, _ := w.noted.LoadOrStore(topic, new(atomic.Int64))
	last := v.(*atomic.Int64)
	was := last.Load()
	if was != 0 && now.UnixNano()-was < int64(ctltopic.PriorityNoteEvery) || !last.CompareAndSwap(was, now.UnixNano()) {
		return outputs
	}
	return append(outputs, ctltopic.PriorityNote(topic, now).Record())
}

// failFlow continues a workflow's step that failed for good.
func (w *Worker) failFlow(res *result, task *onceq.Task, now time.Time) error {
	return w.continueFlow(res, task, nil, flow.Failed(flow.Failure{ID: task.ID, Queue: task.Queue,
		State: res.rec.state, Reason: res.rec.reason, Error: res.rec.err}), now)
}

// ensureTopic makes sure a topic a result writes to exists. The test
// kit's worker (kit.go) has no brokers: it writes nothing, so it checks
// nothing.
func (w *Worker) ensureTopic(topic string) error {
	if w.topics == nil {
		return nil
	}
	return w.topics.ensure(topic)
}

// route encodes a task for its queue, or for a delay bucket when it is due
// later, making sure the topic exists.
func (w *Worker) route(t *onceq.Task, now time.Time) (*kgo.Record, error) {
	topic := onceq.QueueTopic(t.Queue) // a lane queue's tasks go to its lane
	if t.DelayedAt(now) {
		topic = w.cfg.planner.Route(now, t.Due).Topic
	}
	if err := w.ensureTopic(topic); err != nil {
		return nil, fmt.Errorf("consumer: writing to %s: %w", topic, err)
	}
	return t.Record(topic), nil
}

// failure turns a failed run into a retry through the delay buckets, or a
// dead letter after the last attempt or a SkipRetry (failureVerdict). The
// retry record is committed with this run's offset, so a retry is
// scheduled exactly once.
func (w *Worker) failure(task *onceq.Task, key string, herr error, started time.Time) (*result, error) {
	w.metrics.failed.WithLabelValues(w.qlabel(task.Queue)).Inc()
	now := time.Now()
	v := failureVerdict(herr, task.Attempt, w.maxAttemptsOf(task), w.backoffOf(task), w.cfg.jitter, rand.Float64())
	if v.reason != "" {
		res, err := w.deadLetter(task, key, v.reason, v.text, now)
		if res != nil {
			res.rec.started, res.rec.err = started, herr.Error()
		}
		return res, err
	}
	w.cfg.log.Info("task failed; retry scheduled", "id", task.ID, "queue", task.Queue, "attempt", task.Attempt, "retry_in", v.delay, "err", herr)
	return w.again(task, key, herr.Error(), v.delay, task.MaxAttempts, outcomeRetried, onceq.StateRetrying, started, now)
}

// verdict is what a failed run leads to: a dead letter with its reason
// and text, or a retry after delay.
type verdict struct {
	reason string // the dead letter's (dlq.ReasonFailed, dlq.ReasonMaxAttempts); empty: a retry
	text   string // the dead letter's error text
	delay  time.Duration
}

// failureVerdict maps a run that failed with herr, at attempt of
// maxAttempts, to its verdict: SkipRetry and the last attempt dead-letter
// the task; otherwise it runs again after the delay RetryAfter asks for
// (capped at the backoff's max) or after its backoff b, spread by up to
// jitter of it (rnd, in [0, 1), picks how much).
func failureVerdict(herr error, attempt, maxAttempts int, b onceq.Backoff, jitter, rnd float64) verdict {
	if IsSkipRetry(herr) {
		return verdict{reason: dlq.ReasonFailed, text: herr.Error()}
	}
	if attempt >= maxAttempts {
		return verdict{reason: dlq.ReasonMaxAttempts, text: "attempt " + strconv.Itoa(attempt) + " of " + strconv.Itoa(maxAttempts) + ": " + herr.Error()}
	}
	if d, asked := RetryDelay(herr); asked {
		return verdict{delay: CapRetryDelay(d, b.Max)}
	}
	d := b.Delay(attempt)
	return verdict{delay: d + time.Duration(rnd*jitter*float64(d))}
}

// maxAttemptsOf is the task's max attempts (onceq-max-attempts), or the
// worker's MaxAttempts.
func (w *Worker) maxAttemptsOf(task *onceq.Task) int {
	if task.MaxAttempts > 0 {
		return task.MaxAttempts
	}
	return w.cfg.maxAttempts
}

// backoffOf is the task's backoff (onceq-backoff), or the worker's
// Backoff.
func (w *Worker) backoffOf(task *onceq.Task) onceq.Backoff {
	if !task.Backoff.IsZero() {
		return task.Backoff
	}
	return w.cfg.backoff
}

// snooze schedules the task's next run after d (snoozePlan), as a retry
// that counts no attempt. Its scheduled record keeps the result the run
// set, if any: what it has to show while it waits.
func (w *Worker) snooze(task *onceq.Task, key, why string, d time.Duration, started time.Time, result []byte) (*result, error) {
	now := time.Now()
	d, maxAttempts := snoozePlan(d, w.maxAttemptsOf(task), w.backoffOf(task))
	w.cfg.log.Debug("task snoozed", "id", task.ID, "queue", task.Queue, "attempt", task.Attempt, "for", d, "why", why)
	res, err := w.again(task, key, why, d, maxAttempts, outcomeSnoozed, onceq.StateScheduled, started, now)
	if res != nil {
		res.rec.value = result
	}
	return res, err
}

// snoozePlan is a snooze's delay, capped as RetryAfter's is at the
// backoff's max, and the max attempts of its next run: one more than the
// task's maxAttempts, so that its attempt, one more too, counts nothing
// (within what the wire format holds).
func snoozePlan(d time.Duration, maxAttempts int, b onceq.Backoff) (time.Duration, int) {
	return CapRetryDelay(d, b.Max), min(maxAttempts+1, onceq.MaxAttemptCount)
}

// giveBack writes the task back as it came (Release), to its queue or,
// due after d, to the delay buckets (hold): the run leaves no mark and
// no state, so the task's next run is the one this run would have been.
func (w *Worker) giveBack(task *onceq.Task, key, why string, d time.Duration) (*result, error) {
	now := time.Now()
	w.cfg.log.Debug("task released", "id", task.ID, "queue", task.Queue, "attempt", task.Attempt, "for", d, "why", why)
	if d > 0 {
		back := task.Clone()
		back.Due = now.Add(d).Add(time.Millisecond - 1).Truncate(time.Millisecond)
		res, err := w.hold(&back, key, now)
		if res != nil {
			res.outcome = outcomeReleased
		}
		return res, err
	}
	rec, err := w.route(task, now)
	if err != nil {
		return nil, err
	}
	return &result{id: key, at: now, noMark: true, outcome: outcomeReleased, outputs: []*kgo.Record{rec}, queue: task.Queue}, nil
}

// again schedules the task's next attempt after delay, through the delay
// buckets, with the text as its last error: the record is committed with
// this run's offset, so it is scheduled exactly once.
func (w *Worker) again(task *onceq.Task, key, text string, delay time.Duration, maxAttempts int, outcome string, state onceq.TaskState, started, now time.Time) (*result, error) {
	retry := task.Clone()
	retry.Attempt++
	retry.MaxAttempts = maxAttempts
	retry.LastError = onceq.CutError(text)
	retry.Due = now.Add(delay).Add(time.Millisecond - 1).Truncate(time.Millisecond) // never before its backoff
	rec, err := w.route(&retry, now)
	if err != nil {
		return nil, err
	}
	return &result{id: key, at: now, outcome: outcome, outputs: []*kgo.Record{rec}, queue: task.Queue,
		rec: taskOutcome{state: state, task: factsOf(task), started: started, due: retry.Due, err: retry.LastError}}, nil
}

// deadLetter writes the task to its queue's dead letters with every
// original header, the reason in onceq-error and the failure time in
// onceq-failed; the result marks the run processed.
func (w *Worker) deadLetter(task *onceq.Task, key, reason, text string, now time.Time) (*result, error) {
	if err := w.ensureDLQ(task.Queue); err != nil {
		return nil, err
	}
	w.metrics.dead.WithLabelValues(w.qlabel(task.Queue), reason).Inc()
	w.cfg.log.Info("task dead-lettered", "id", task.ID, "queue", task.Queue, "attempt", task.Attempt, "reason", reason, "err", text)
	state := onceq.StateDead
	if reason == dlq.ReasonExpired {
		state = onceq.StateExpired
	}
	res := &result{id: key, at: now, outcome: outcomeDead, outputs: []*kgo.Record{dlq.EncodeTask(task, reason, text, now)}, queue: task.Queue,
		rec: taskOutcome{state: state, task: factsOf(task), reason: reason, err: text}}
	if err := w.failFlow(res, task, now); err != nil {
		return nil, err
	}
	return res, nil
}

func (w *Worker) ensureDLQ(queue string) error {
	topic := broker.DLQTopic(queue)
	if err := w.ensureTopic(topic); err != nil {
		return fmt.Errorf("consumer: creating dead-letter topic %s: %w", topic, err)
	}
	return nil
}

// deadLetterRaw dead-letters a record whose onceq headers cannot be
// decoded, as it is, with the reason added.
func (w *Worker) deadLetterRaw(r *kgo.Record, id string, cause error) (*result, error) {
	if err := w.ensureDLQ(r.Topic); err != nil {
		return nil, err
	}
	now := time.Now()
	w.metrics.dead.WithLabelValues(w.qlabel(r.Topic), dlq.ReasonMalformed).Inc()
	dead := dlq.EncodeRecord(r, broker.DLQTopic(r.Topic), dlq.ReasonMalformed, cause.Error(), now)
	return &result{id: id, at: now, outcome: outcomeDead, outputs: []*kgo.Record{dead}, queue: r.Topic,
		rec: taskOutcome{state: onceq.StateDead, reason: dlq.ReasonMalformed, err: cause.Error()}}, nil
}

// hold sends a task due later on to the delay buckets, as it is: it leaves
// no mark, so that it runs when it comes back due.
func (w *Worker) hold(task *onceq.Task, key string, now time.Time) (*result, error) {
	rec, err := w.route(task, now)
	if err != nil {
		return nil, err
	}
	w.cfg.log.Debug("task due later: sent to the delay buckets", "id", task.ID, "due", task.Due)
	return &result{id: key, noMark: true, outcome: outcomeForwarded, outputs: []*kgo.Record{rec}, queue: task.Queue,
		rec: taskOutcome{state: onceq.StateScheduled, task: factsOf(task), due: task.Due}}, nil
}

// maxRefusals bounds the commits that refuse one result's records.
const maxRefusals = 3

// homePartitioner is Kafka's default partitioner of keyed records
// (murmur2), which the onceq producer uses; it keeps no state.
var homePartitioner = broker.KeyPartitioner().ForTopic("")

// forwardHome moves a task with a client-chosen ID found in a partition
// other than the one its key maps to (a producer whose partitioner is not
// Kafka's default, such as librdkafka's) to that partition, without running
// it, in the transaction of its offset: duplicates of an ID are found
// there, whichever client wrote them. A record without onceq-id is never
// moved: its ID is its offset. nil, nil: the record is home.
func (w *Worker) forwardHome(r *kgo.Record, task *onceq.Task) (*result, error) {
	if !hasID(r) {
		return nil, nil
	}
	keyed := r // partitioned by its key, or as its task when it has none
	if len(r.Key) == 0 {
		keyed = &kgo.Record{Key: task.PartitionKey()}
	}
	n, err := w.topics.partitions(r.Topic)
	if err != nil {
		return nil, err
	}
	home := homePartitioner.Partition(keyed, int(n))
	if int32(home) == r.Partition {
		return nil, nil
	}
	if !w.topics.confirmPartitions(r.Topic, n) {
		// The partition count just changed: ask again on the next run.
		return nil, fmt.Errorf("consumer: partition count of %s changed", r.Topic)
	}
	w.cfg.log.Debug("task outside its key's partition: forwarded", "id", task.ID, "topic", r.Topic, "partition", r.Partition, "home", home)
	fwd := &kgo.Record{Topic: r.Topic, Key: keyed.Key, Value: r.Value, Headers: r.Headers}
	return &result{id: task.DedupKey(), noMark: true, outcome: outcomeForwarded, outputs: []*kgo.Record{fwd}, queue: task.Queue}, nil
}

// hasID reports whether the record carries onceq-id: a client chose its
// ID.
func hasID(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == onceq.HeaderID {
			return true
		}
	}
	return false
}

// refuseTooLarge turns a result whose output (a task it emitted, its retry
// or its dead letter) or state write the brokers refused as too large into
// a dead letter with reason too_large: the source record's key and headers
// without its payload, the refused record named in onceq-error. Its state
// writes are dropped. After a second refusal the dead letter keeps only the
// onceq headers.
func (w *Worker) refuseTooLarge(ps *partState, res *result, refused *kgo.Record, cause error) {
	res.refused++
	ps.retract(res)
	res.emitted = nil // its emitted tasks are not written
	if res.refused > maxRefusals {
		// Not even a bare dead letter fits: the task ends with nothing
		// written but its mark, and says so.
		w.cfg.log.Error("task dropped: even its bare dead letter was refused as too large", "topic", res.src.Topic,
			"partition", res.src.Partition, "offset", res.src.Offset, "err", cause)
		res.outcome, res.outputs = outcomeDead, nil
		res.rec.state, res.rec.reason, res.rec.err, res.rec.value = onceq.StateDead, dlq.ReasonTooLarge, cause.Error(), nil
		return
	}
	src := res.src
	queue := cmp.Or(res.queue, src.Topic)
	if err := w.ensureDLQ(queue); err != nil {
		// The next commit fails on the missing topic and asks again.
		w.cfg.log.Warn("creating dead-letter topic", "queue", queue, "err", err)
	}
	text := fmt.Sprintf("%d-byte record to %s refused (%v); payload dropped, the task was %s/%d@%d",
		len(refused.Key)+len(refused.Value), refused.Topic, cause, src.Topic, src.Partition, src.Offset)
	bare := &kgo.Record{Key: src.Key}
	for _, h := range src.Headers {
		if res.refused == 1 || strings.HasPrefix(h.Key, "onceq-") {
			bare.Headers = append(bare.Headers, h)
		}
	}
	if res.refused > 1 {
		bare.Key = nil
	}
	w.cfg.log.Warn("task dead-lettered: a record it writes is too large", "queue", queue, "topic", src.Topic, "partition", src.Partition,
		"offset", src.Offset, "refused_topic", refused.Topic, "err", cause)
	w.metrics.dead.WithLabelValues(w.qlabel(queue), dlq.ReasonTooLarge).Inc()
	res.outcome, res.outputs = outcomeDead, []*kgo.Record{dlq.EncodeRecord(bare, broker.DLQTopic(queue), dlq.ReasonTooLarge, text, time.Now())}
	res.rec.state, res.rec.reason, res.rec.err, res.rec.value = onceq.StateDead, dlq.ReasonTooLarge, text, nil
	if res.rec.task.ok && res.refused == 1 {
		// A workflow's step goes on as failed (its callbacks, its join):
		// once, since what it emits then may be refused too. The task is
		// decoded again from its record, which the result keeps.
		t, err := onceq.FromRecord(src)
		if err == nil {
			err = w.failFlow(res, &t, time.Now())
		}
		if err != nil {
			w.cfg.log.Warn("a workflow step refused as too large: its workflow cannot go on", "id", res.rec.task.id, "err", err)
		}
	}
}
