package consumer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
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

// errTakenOver ends a lane goroutine whose handler the watchdog abandoned.
var errTakenOver = errors.New("lane taken over")

// execute runs one record to its result. Handler failures are results too
// (a retry record or a dead letter); only infrastructure errors (the
// checkpoint, the brokers) make it try again in place after a pause.
// takenOver means the watchdog abandoned the handler and another goroutine
// now runs the lane: this one must exit.
func (w *Worker) execute(ln *lane, it *item, quit <-chan struct{}) (res *result, takenOver bool) {
	res = w.retryInPlace(it, quit, func() (*result, error) {
		res, err := w.attempt(ln, it)
		if errors.Is(err, errTakenOver) {
			takenOver = true
			return nil, nil
		}
		return res, err
	})
	return res, takenOver
}

// retryInPlace calls fn until it succeeds, pausing after infrastructure
// errors. nil means the work is dropped: the partition moved on, or the
// worker stops.
func (w *Worker) retryInPlace(it *item, quit <-chan struct{}, fn func() (*result, error)) *result {
	for run := 1; ; run++ {
		if it.stale() {
			return nil
		}
		res, err := fn()
		if err == nil {
			return res
		}
		w.cfg.log.Warn("running a task failed for a reason outside its handler; trying again after a pause", "topic", it.rec.Topic,
			"partition", it.rec.Partition, "offset", it.rec.Offset, "run", run, "err", err, "pause", w.cfg.retryPause)
		select {
		case <-time.After(w.cfg.retryPause):
		case <-quit:
			return nil
		}
		if w.stopping.Load() {
			return nil
		}
	}
}

// attempt decodes, deduplicates, checks expiry and handles a record once.
func (w *Worker) attempt(ln *lane, it *item) (*result, error) {
	r := it.rec
	task, err := onceq.FromRecord(r)
	if err != nil {
		w.cfg.log.Warn("malformed task: dead-lettered", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
		return w.deadLetterRaw(r, onceq.RecordID(r.Topic, r.Partition, r.Offset), err)
	}
	key := task.DedupKey()
	if w.cfg.guarantee == ExactlyOnce {
		dup, err := it.ps.processed(key, it)
		if err != nil {
			return nil, err
		}
		if dup || it.twin && ln.finishedKey(key) {
			return &result{id: key, dup: true, outcome: outcomeDuplicate}, nil
		}
	}
	now := time.Now()
	if !task.Expires.IsZero() && now.After(task.Expires) {
		if w.cfg.dropExpired {
			return &result{id: key, at: now, outcome: outcomeExpired}, nil
		}
		res, err := w.deadLetter(&task, key, reasonExpired, "expired at "+task.Expires.UTC().Format(time.RFC3339Nano), now)
		if res != nil {
			res.outcome = outcomeExpired
		}
		return res, err
	}
	w.metrics.latency.Observe(sinceDue(&task, now).Seconds())
	t := &Task{Task: task, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, w: w, state: State{ps: it.ps}}
	if herr := w.runHandler(ln, it, t, key, now); herr != nil {
		if errors.Is(herr, errTakenOver) {
			return nil, herr
		}
		return w.failure(&task, key, herr)
	}
	return w.success(t, key)
}

// errAbandoned is the failure of a handler that ran past its time-to-run
// and its grace.
var errAbandoned = errors.New("abandoned: the handler ignored its canceled context past its time-to-run and grace")

// runHandler calls the handler on the lane's goroutine with the task's
// time-to-run, turning a panic into an error. The watchdog cancels the
// context at the deadline and abandons the run after the grace period.
func (w *Worker) runHandler(ln *lane, it *item, t *Task, key string, now time.Time) (err error) {
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = w.cfg.defaultTimeout
	}
	r := &handlerRun{it: it, task: &t.Task, key: key, abandonAt: now.Add(timeout + w.cfg.abandonGrace)}
	r.ctx.deadline, r.ctx.timeout = now.Add(timeout), timeout
	w.metrics.inflight.Inc()
	ln.cur.Store(r)
	defer func() {
		if p := recover(); p != nil {
			w.cfg.log.Error("handler panicked", "id", t.ID, "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panicked: %v", p)
		}
		ln.cur.CompareAndSwap(r, nil)
		w.metrics.inflight.Dec()
		if !r.state.CompareAndSwap(runRunning, runDone) {
			err = errTakenOver
			return
		}
		w.metrics.handler.Observe(time.Since(now).Seconds())
		if err == nil && time.Now().After(r.ctx.deadline) {
			err = fmt.Errorf("task %q exceeded its time-to-run of %v", t.ID, timeout)
		}
	}()
	return w.cfg.handler.Handle(&r.ctx, t)
}

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
