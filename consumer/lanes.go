package consumer

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"runtime/debug"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
)

// item is one fetched record on its way through a lane.
type item struct {
	ps    *partState
	epoch uint64
	rec   *kgo.Record
}

// lanes run handlers with key-ordered concurrency: a record goes to the
// lane its partition and key hash to, and each lane runs its records one
// at a time, in order. Records of one key therefore run in offset order;
// records of different keys run concurrently on up to n lanes.
type lanes struct {
	w    *Worker
	seed maphash.Seed
	chs  []chan *item
	wg   sync.WaitGroup
	quit chan struct{}
}

func newLanes(w *Worker, n, buffered int) *lanes {
	l := &lanes{w: w, seed: maphash.MakeSeed(), chs: make([]chan *item, n), quit: make(chan struct{})}
	for i := range l.chs {
		l.chs[i] = make(chan *item, buffered/n+1)
		l.wg.Add(1)
		go l.run(l.chs[i])
	}
	return l
}

func (l *lanes) submit(it *item) {
	var h maphash.Hash
	h.SetSeed(l.seed)
	h.WriteString(it.rec.Topic)
	h.WriteByte(byte(it.rec.Partition))
	h.WriteByte(byte(it.rec.Partition >> 8))
	h.Write(it.rec.Key)
	select {
	case l.chs[h.Sum64()%uint64(len(l.chs))] <- it:
	case <-l.quit:
	}
}

// stop abandons what is queued and waits for running handlers no longer
// than they take to notice their canceled context.
func (l *lanes) stop() {
	close(l.quit)
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
}

func (l *lanes) run(ch chan *item) {
	defer l.wg.Done()
	for {
		select {
		case it := <-ch:
			l.w.finish(it, l.w.execute(it, l.quit))
		case <-l.quit:
			return
		}
	}
}

// stale reports whether the item's partition moved on: revoked, or reset
// by an aborted commit.
func (it *item) stale() bool {
	it.ps.mu.Lock()
	defer it.ps.mu.Unlock()
	return it.ps.revoked || it.ps.epoch != it.epoch
}

// execute runs one record to its result, running it again after a pause
// while it fails. nil means the record's work is dropped: its partition
// moved on, or the worker stops.
func (w *Worker) execute(it *item, quit <-chan struct{}) *result {
	for run := 1; ; run++ {
		if it.stale() {
			return nil
		}
		res, err := w.attempt(it)
		if err == nil {
			return res
		}
		w.metrics.processed.WithLabelValues(it.rec.Topic, "failed").Inc()
		if IsSkipRetry(err) {
			task, _ := onceq.FromRecord(it.rec) // it decoded before the handler ran
			if res, dlqErr := w.deadLetter(it.rec, task.ID, "failed: "+err.Error()); dlqErr == nil {
				return res
			}
		}
		pause := w.cfg.retryPause
		if d, ok := RetryDelay(err); ok {
			pause = d
		}
		w.cfg.log.Warn("task failed; running it again after a pause", "topic", it.rec.Topic, "partition", it.rec.Partition,
			"offset", it.rec.Offset, "run", run, "err", err, "pause", pause)
		select {
		case <-time.After(pause):
		case <-quit:
			return nil
		}
		if w.stopping.Load() {
			return nil
		}
	}
}

// attempt decodes, deduplicates and handles a record once.
func (w *Worker) attempt(it *item) (*result, error) {
	r := it.rec
	task, err := onceq.FromRecord(r)
	if err != nil {
		return w.deadLetterMalformed(r, err)
	}
	if w.cfg.guarantee == ExactlyOnce {
		dup, err := it.ps.processed(task.ID)
		if err != nil {
			return nil, err
		}
		if dup {
			return &result{id: task.ID, dup: true}, nil
		}
	}
	w.metrics.latency.Observe(sinceDue(&task, time.Now()).Seconds())
	t := &Task{Task: task, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, w: w, state: State{ps: it.ps}}
	if err := w.runHandler(t); err != nil {
		return nil, err
	}
	return w.success(t)
}

// runHandler calls the handler with the task's time-to-run, turning a
// panic into an error.
func (w *Worker) runHandler(t *Task) (err error) {
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = w.cfg.defaultTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	w.metrics.inflight.Inc()
	start := time.Now()
	defer func() {
		w.metrics.inflight.Dec()
		w.metrics.handler.Observe(time.Since(start).Seconds())
		if p := recover(); p != nil {
			w.cfg.log.Error("handler panicked", "id", t.ID, "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("consumer: handler panicked: %v", p)
		}
	}()
	err = w.cfg.handler.Handle(ctx, t)
	if err == nil && ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("consumer: task %q exceeded its time-to-run of %v", t.ID, timeout)
	}
	return err
}

// success turns a handled task into its result: outputs as records, state
// writes, the processed-ID mark.
func (w *Worker) success(t *Task) (*result, error) {
	now := time.Now()
	res := &result{id: t.ID, at: now, writes: t.state.writes}
	for i := range t.emits {
		out := &t.emits[i]
		out.Resolve(now)
		topic := out.Queue
		if out.DelayedAt(now) {
			topic = w.cfg.planner.Route(now, out.Due).Topic
		}
		if err := w.topics.ensure(topic); err != nil {
			return nil, fmt.Errorf("consumer: emitting to %s: %w", topic, err)
		}
		res.outputs = append(res.outputs, out.Record(topic))
	}
	return res, nil
}

// deadLetterMalformed sends a record whose onceq headers cannot be decoded
// to its queue's dead letters, with the reason, instead of running it.
func (w *Worker) deadLetterMalformed(r *kgo.Record, err error) (*result, error) {
	w.cfg.log.Warn("malformed task: dead-lettered", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
	return w.deadLetter(r, onceq.RecordID(r.Topic, r.Partition, r.Offset), "malformed: "+err.Error())
}

// deadLetter writes the record to its queue's dead letters with the reason
// in onceq-error; the result marks the task processed.
func (w *Worker) deadLetter(r *kgo.Record, id, reason string) (*result, error) {
	dlq := broker.DLQTopic(r.Topic)
	if err := w.topics.ensure(dlq); err != nil {
		return nil, fmt.Errorf("consumer: creating dead-letter topic %s: %w", dlq, err)
	}
	hs := make([]kgo.RecordHeader, 0, len(r.Headers)+1)
	for _, h := range r.Headers {
		if h.Key != onceq.HeaderError {
			hs = append(hs, h)
		}
	}
	hs = append(hs, kgo.RecordHeader{Key: onceq.HeaderError, Value: []byte(onceq.CutError(reason))})
	return &result{id: id, at: time.Now(), outputs: []*kgo.Record{{Topic: dlq, Key: r.Key, Value: r.Value, Headers: hs}}}, nil
}
