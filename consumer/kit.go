package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/checkpoint"
	"github.com/onceq/onceq/consumer/internal/kit"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/dlq"
	"github.com/onceq/onceq/internal/ctltopic"
)

// The test kit, package consumertest, runs a handler through a worker's
// executor: a Worker made by New, never started, whose one partition
// holds the task's record. It reaches these functions through package
// consumer/internal/kit, so that nothing of the kit is exported here.
func init() {
	kit.Provide(kit.Funcs[*Task, Handler, Opt]{NewTask: newKitTask, Emitted: kitEmitted, Writes: kitWrites, Run: kitRun})
}

// newKitTask builds a task of a worker made by New with the options (the
// kit's placement first, so that they may override it). The worker has no
// brokers: it checks no topic (ensureTopic), its control topic has no
// cancel and no pause, and its delay ladder is the given Planner or
// delay.DefaultBuckets. The partition's committed state is c.State. The
// task is read back from its record, as a worker reads it.
func newKitTask(task onceq.Task, c kit.Config, opts []Opt) (*Task, error) {
	base := []Opt{Queues("consumertest"), CheckpointDir("consumertest"), Concurrency(1),
		WithHandler(HandlerFunc(func(context.Context, *Task) error { return nil }))}
	if n := c.MaxMessageBytes; n > 0 {
		base = append(base, MaxMessageBytes(n))
		if room := maxResult(n); room < DefaultMaxResultBytes {
			base = append(base, MaxResultBytes(max(room, 1)))
		}
	}
	w, err := New(append(base, opts...)...)
	if err != nil {
		return nil, err
	}
	// The task as the worker reads it from its record: attempt 1 for 0,
	// the key its ID when it has none, its queue the topic when it has
	// none, nothing that is not on the wire.
	if task.Queue == "" {
		task.Queue = c.Topic
	}
	rec := task.Record(c.Topic)
	rec.Partition, rec.Offset = c.Partition, c.Offset
	if task, err = onceq.FromRecord(rec); err != nil {
		return nil, fmt.Errorf("consumer: the task's record does not decode (a worker dead-letters it as malformed): %w", err)
	}
	w.control = &ctltopic.Reader{}
	if w.cfg.planner == nil {
		w.cfg.planner = delay.DefaultPlanner()
	}
	ps := newPartState(checkpoint.TP{Topic: c.Topic, Partition: c.Partition}, nil)
	ps.restored = true
	for k, v := range c.State {
		ps.overlay[k] = overlayVal{value: append([]byte{}, v...)}
	}
	return &Task{Task: task, Topic: c.Topic, Partition: c.Partition, Offset: c.Offset, w: w, state: State{ps: ps}}, nil
}

// kitEmitted returns the tasks t emitted so far, with the IDs Emit
// derived.
func kitEmitted(t *Task) []onceq.Task {
	out := make([]onceq.Task, len(t.emits))
	for i := range t.emits {
		out[i] = t.emits[i].Clone()
	}
	return out
}

// kitWrites returns t's state writes so far, one per key, as a success
// commits them.
func kitWrites(t *Task) []kit.Write {
	out := make([]kit.Write, len(t.state.writes))
	for i, sw := range t.state.writes {
		out[i] = kit.Write{Key: sw.key, Value: sw.value}
	}
	return out
}

// kitRun runs one attempt of t with h as its worker's slot does once the
// record may run (run: the handler under its time-to-run with the
// watchdog, panics recovered, the result or retry or dead letter, the
// workflow's continuation), and returns what the worker would commit. A
// run the watchdog abandons is recorded by the watchdog, as in a worker.
// ctx done before the handler returns is a shutdown: the run is canceled
// and its result dropped, as the worker's at its shutdown timeout.
func kitRun(ctx context.Context, h Handler, t *Task) kit.Outcome {
	w, ps := t.w, t.state.ps
	w.cfg.handler = h
	rec := t.Task.Record(t.Topic)
	rec.Partition, rec.Offset = t.Partition, t.Offset
	admitted := ps.admit([]*kgo.Record{rec})
	if len(admitted) == 0 {
		return kit.Outcome{Err: errors.New("consumertest: the task ran already: build another")}
	}
	it := admitted[0]
	it.dedupKey, it.idem = t.DedupKey(), t.IdempotencyKey()
	w.buffered.Add(1) // admitted: finish signals w.wake when it is done
	s := w.sched
	s.started.Store(1) // the run's slot, slots[0], which the watchdog watches
	s.wg.Add(1)
	go s.watchdog()
	defer func() {
		close(s.quit)
		s.wg.Wait()
	}()
	defer context.AfterFunc(ctx, func() { s.cancelAll() })()

	type ran struct {
		res       *result
		herr, err error
	}
	done := make(chan ran, 1)
	go func() {
		t.started = time.Now()
		res, herr, err := w.run(s.slots[0], it, t, t.DedupKey())
		if !errors.Is(err, errTakenOver) {
			done <- ran{res, herr, err}
		}
	}()
	select {
	case r := <-done:
		switch {
		case errors.Is(r.err, errCanceledRun):
			return kit.Outcome{Err: context.Cause(ctx)}
		case r.err != nil:
			return kit.Outcome{Err: r.err}
		}
		return kitOutcome(r.res, r.herr)
	case <-w.wake:
		// The watchdog abandoned the handler and recorded its failure.
		res, _, _, _ := ps.collect()
		if len(res) == 0 {
			return kit.Outcome{Err: errAbandoned}
		}
		return kitOutcome(res[0], errAbandoned)
	}
}

// kitOutcome reads what res commits: its task record's state and value,
// its writes, and its outputs decoded (dead letters, emitted tasks, the
// retry; not the control topic's tombstones).
func kitOutcome(res *result, herr error) kit.Outcome {
	o := kit.Outcome{State: res.rec.state, Err: herr, Value: res.rec.value}
	if !res.noMark {
		for _, sw := range res.writes {
			o.Writes = append(o.Writes, kit.Write{Key: sw.key, Value: sw.value})
		}
	}
	retry := res.outcome == outcomeRetried || res.outcome == outcomeSnoozed || res.outcome == outcomeReleased
	for i, rec := range res.outputs {
		switch {
		case strings.HasPrefix(rec.Topic, broker.DLQPrefix):
			l := dlq.Decode(rec, res.queue)
			o.DeadLetter = &l
			continue
		case rec.Topic == ctltopic.Topic:
			continue
		}
		task, err := onceq.FromRecord(rec)
		switch {
		case err != nil:
			o.Err = errors.Join(o.Err, err)
		case i == 0 && retry:
			o.Retry = &task
		default:
			o.Emitted = append(o.Emitted, task)
		}
	}
	return o
}
