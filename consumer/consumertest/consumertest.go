// Package consumertest unit-tests onceq handlers without a broker, as
// River's rivertest does for workers: it runs a Handler on a task through
// the same code a worker runs for one attempt, and reports what the
// worker would commit.
//
// Run (or NewTask and Task.Run) builds a *consumer.Task from an
// onceq.Task, with an in-memory State seeded by the State option, and
// runs the handler as a worker's slot does once the task may run: under
// the task's time-to-run (its Timeout, or the worker's TaskTimeout),
// whose deadline cancels the handler's context, with a panic recovered
// as a failure; a failure becomes a retry with the worker's backoff, or
// a dead letter after the last attempt or a consumer.SkipRetry; a
// consumer.Snooze a run again that counts no attempt; and a workflow
// step's end emits its continuation. The Result says which, with what
// the commit would write: the emitted tasks, the state writes, the
// result, the retry and its due time, the dead letter's reason.
//
// The worker is one that consumer.New makes with the options WorkerOptions
// gives, never started: it has no brokers, checks no topic, sees no
// cancel or pause, and its delay ladder is consumer.Planner's or
// delay.DefaultBuckets. What a worker decides before it runs a task
// (decoding its record, deduplication, cancels, expiry, a due time ahead)
// is not run: the task runs as one that is due, not a duplicate, and not
// canceled.
//
// The Task behaves as a worker's: State.Get sees the task's own writes
// over the seeded values, Set of nil stores an empty value, Counter and
// Delete work, and Emit validates with the worker's size limit and
// derives the IDs of emitted tasks as <id>/<n>.
package consumertest

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/consumer/internal/kit"
	"github.com/onceq/onceq/dlq"
)

// funcs are package consumer's side of the kit.
func funcs() kit.Funcs[*consumer.Task, consumer.Handler, consumer.Opt] {
	return kit.Get[*consumer.Task, consumer.Handler, consumer.Opt]()
}

// Opt configures a Task.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	kit    kit.Config
	worker []consumer.Opt
}

// Topic sets the topic the task came from. Default: the task's queue, or
// DefaultTopic when it has none.
func Topic(topic string) Opt { return optFunc(func(c *config) { c.kit.Topic = topic }) }

// Partition sets the partition the task came from. Default: 0.
func Partition(p int32) Opt { return optFunc(func(c *config) { c.kit.Partition = p }) }

// Offset sets the offset the task came from. Default: 0.
func Offset(o int64) Opt { return optFunc(func(c *config) { c.kit.Offset = o }) }

// State seeds the partition's committed state with key = value; it may be
// given more than once. Default: empty.
func State(key, value []byte) Opt {
	k, v := string(key), append([]byte{}, value...)
	return optFunc(func(c *config) {
		if c.kit.State == nil {
			c.kit.State = map[string][]byte{}
		}
		c.kit.State[k] = v
	})
}

// MaxMessageBytes bounds what Emit accepts, as the worker's
// consumer.MaxMessageBytes does, and lowers the worker's MaxResultBytes to
// what a record of that size holds. Default: onceq.DefaultMaxMessageBytes.
func MaxMessageBytes(n int) Opt { return optFunc(func(c *config) { c.kit.MaxMessageBytes = n }) }

// WorkerOptions configures the worker whose executor runs the task with
// consumer.New's options, after the kit's own: those of an attempt
// (TaskTimeout, MaxAttempts, Backoff, Jitter, AbandonGrace,
// MaxMessageBytes, MaxResultBytes, WithGuarantee, Planner, Logger) take
// effect, and the others are checked and have none. It may be given more
// than once. Default: none, the worker's defaults.
func WorkerOptions(opts ...consumer.Opt) Opt {
	return optFunc(func(c *config) { c.worker = append(c.worker, opts...) })
}

// DefaultTopic is the topic of a task without a queue.
const DefaultTopic = "onceq-test"

// Write is one key's State write, as the worker commits it: one per key,
// in the order the handler first wrote each, with the last value.
type Write struct {
	Key []byte
	// Value is the value Set wrote (empty, never nil, for Set of nil);
	// nil for a Delete.
	Value  []byte
	Delete bool
}

// Task is a consumer.Task built for a test, and the worker that runs it.
type Task struct {
	t    *consumer.Task
	seed map[string][]byte
}

// NewTask builds a Task of task. A task without an ID gets the worker's
// default, <topic>/<partition>/<offset>. It panics when consumer.New
// refuses the worker's options.
func NewTask(task onceq.Task, opts ...Opt) *Task {
	var c config
	for _, o := range opts {
		o.apply(&c)
	}
	if c.kit.Topic == "" {
		c.kit.Topic = task.Queue
		if c.kit.Topic == "" {
			c.kit.Topic = DefaultTopic
		}
	}
	if task.ID == "" {
		task.ID = c.kit.Topic + "/" + strconv.FormatInt(int64(c.kit.Partition), 10) + "/" + strconv.FormatInt(c.kit.Offset, 10)
	}
	t, err := funcs().NewTask(task, c.kit, c.worker)
	if err != nil {
		panic(fmt.Sprintf("consumertest: %v", err))
	}
	return &Task{t: t, seed: c.kit.State}
}

// Consumer returns the *consumer.Task to hand to a handler, for a test
// that calls the handler itself rather than Run.
func (k *Task) Consumer() *consumer.Task { return k.t }

// Run runs one attempt of the task with h, as its worker would, and
// returns what the worker would commit. A Task runs once: Run again
// reports an error. The handler's context is the worker's, with the
// task's time-to-run as its deadline; it carries none of ctx's values.
// ctx done before the handler returns is the worker's shutdown: the
// handler's context is canceled, and the Result has no Outcome (the
// worker drops the run's effects, and the task runs again) and ctx's
// error.
func (k *Task) Run(ctx context.Context, h consumer.Handler) *Result {
	if err := ctx.Err(); err != nil {
		return &Result{Err: context.Cause(ctx), State: k.state(nil)}
	}
	o := funcs().Run(ctx, h, k.t)
	res := &Result{Outcome: o.State, Err: o.Err, Emitted: o.Emitted, Value: o.Value, Retry: o.Retry, DeadLetter: o.DeadLetter}
	res.Writes = writes(o.Writes)
	res.State = k.state(res.Writes)
	return res
}

// Emitted returns the tasks the handler emitted so far, in order, with
// derived IDs.
func (k *Task) Emitted() []onceq.Task { return funcs().Emitted(k.t) }

// Writes returns the handler's State writes so far, one per key.
func (k *Task) Writes() []Write { return writes(funcs().Writes(k.t)) }

// State returns the state the handler sees now: the seeded values
// overlaid by its writes so far.
func (k *Task) State() map[string][]byte { return k.state(k.Writes()) }

// state is the seeded values overlaid by ws.
func (k *Task) state(ws []Write) map[string][]byte {
	out := make(map[string][]byte, len(k.seed))
	for key, v := range k.seed {
		out[key] = v
	}
	for _, w := range ws {
		if w.Delete {
			delete(out, string(w.Key))
		} else {
			out[string(w.Key)] = w.Value
		}
	}
	return out
}

func writes(ws []kit.Write) []Write {
	var out []Write
	for _, w := range ws {
		cw := Write{Key: append([]byte{}, w.Key...), Delete: w.Value == nil}
		if !cw.Delete {
			cw.Value = append([]byte{}, w.Value...)
		}
		out = append(out, cw)
	}
	return out
}

// Result is what the worker would commit for one attempt of a task.
type Result struct {
	// Outcome is the state the attempt leaves its task in:
	// onceq.StateSucceeded; onceq.StateRetrying (Retry holds the next
	// attempt); onceq.StateScheduled, snoozed (Retry holds the next run);
	// onceq.StateDead (DeadLetter says why). Empty when the run was
	// dropped or failed outside its handler: Err says why.
	Outcome onceq.TaskState
	// Err is why the attempt failed, as the worker saw it: what the
	// handler returned, its panic ("handler panicked: ..."), or its
	// time-to-run passing. Nil when it succeeded.
	Err error
	// Emitted are the tasks the worker writes downstream, in order: on
	// success, those the handler emitted (a task due later is written to
	// the delay buckets, and shows its due time), then, for a workflow's
	// step, its continuation (the next steps, callbacks, or the report
	// to its group's join); for a step that ends dead, its continuation
	// as failed. A retry or a snooze emits nothing.
	Emitted []onceq.Task
	// Writes are the State writes the worker commits (on success only),
	// one per key; State is the resulting state, the seeded values
	// overlaid by Writes.
	Writes []Write
	State  map[string][]byte
	// Value is the result (consumer.Task.SetResult) the task record keeps:
	// on success, and while a snoozed task waits.
	Value []byte
	// Retry is the task's next run, written through the delay buckets:
	// its Attempt (one more), MaxAttempts, Due (after the worker's backoff,
	// or the delay a consumer.RetryAfter or consumer.Snooze asked for, as
	// capped) and LastError. Nil unless Outcome is StateRetrying or
	// StateScheduled.
	Retry *onceq.Task
	// DeadLetter is the task's dead letter as package dlq reads it back:
	// the task with its original headers, the Reason (dlq.ReasonFailed
	// for a SkipRetry, dlq.ReasonMaxAttempts after the last attempt) and
	// the Error text. Nil when there is none.
	DeadLetter *dlq.Letter
}

// SkipRetry reports whether Err is final (consumer.SkipRetry): the worker
// dead-letters the task.
func (r *Result) SkipRetry() bool { return consumer.IsSkipRetry(r.Err) }

// RetryAfter returns the delay a consumer.RetryAfter in Err asks for, as
// asked (the worker caps it, see consumer.CapRetryDelay, and Retry.Due is
// the capped one).
func (r *Result) RetryAfter() (time.Duration, bool) { return consumer.RetryDelay(r.Err) }

// Run builds a Task of task and runs h on it; see NewTask and Task.Run.
func Run(ctx context.Context, h consumer.Handler, task onceq.Task, opts ...Opt) *Result {
	return NewTask(task, opts...).Run(ctx, h)
}
