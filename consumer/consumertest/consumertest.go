// Package consumertest unit-tests onceq handlers without a broker, as
// River's rivertest does for workers: build a *consumer.Task from an
// onceq.Task with an in-memory State, run a Handler on it, and inspect what
// it emitted, what it wrote to State and what it returned.
//
// The Task behaves as a worker's: State.Get sees the task's own writes
// over the seeded values, Set of nil stores an empty value, Counter and
// Delete work, and Emit validates with the worker's default size limit and
// derives the IDs of emitted tasks as <id>/<n>.
package consumertest

import (
	"context"
	"strconv"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
)

// Opt configures a Task.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	kit consumer.KitConfig
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

// MaxMessageBytes bounds what Emit accepts, as the worker's option does.
// Default: onceq.DefaultMaxMessageBytes.
func MaxMessageBytes(n int) Opt { return optFunc(func(c *config) { c.kit.MaxMessageBytes = n }) }

// DefaultTopic is the topic of a task without a queue.
const DefaultTopic = "onceq-test"

// Write is one State write, in the order the handler made it.
type Write struct {
	Key []byte
	// Value is the value Set wrote (empty, never nil, for Set of nil);
	// nil for a Delete.
	Value  []byte
	Delete bool
}

// Task is a consumer.Task built for a test, with a record of what its
// handler did.
type Task struct {
	t      *consumer.Task
	seed   map[string][]byte
	writes []Write
}

// NewTask builds a Task of task. A task without an ID gets the worker's
// default, <topic>/<partition>/<offset>.
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
	kt := &Task{seed: c.kit.State}
	c.kit.OnWrite = func(key, value []byte) {
		w := Write{Key: append([]byte{}, key...), Delete: value == nil}
		if value != nil {
			w.Value = append([]byte{}, value...)
		}
		kt.writes = append(kt.writes, w)
	}
	kt.t = consumer.NewKitTask(task, c.kit)
	return kt
}

// Consumer returns the *consumer.Task to hand to a handler.
func (k *Task) Consumer() *consumer.Task { return k.t }

// Run runs h on the task and returns what it did.
func (k *Task) Run(ctx context.Context, h consumer.Handler) *Result {
	err := h.Handle(ctx, k.t)
	return &Result{Err: err, Emitted: k.Emitted(), Writes: k.Writes(), State: k.State()}
}

// Emitted returns the tasks emitted so far, in order, with derived IDs.
func (k *Task) Emitted() []onceq.Task { return consumer.KitEmitted(k.t) }

// Writes returns the State writes so far, in order.
func (k *Task) Writes() []Write { return append([]Write(nil), k.writes...) }

// State returns the resulting state: the seeded values overlaid by the
// writes so far.
func (k *Task) State() map[string][]byte {
	out := make(map[string][]byte, len(k.seed))
	for key, v := range k.seed {
		out[key] = v
	}
	for _, w := range k.writes {
		if w.Delete {
			delete(out, string(w.Key))
		} else {
			out[string(w.Key)] = w.Value
		}
	}
	return out
}

// Result is what a handler did with its task.
type Result struct {
	// Err is what the handler returned.
	Err error
	// Emitted are the tasks it emitted, in order. The worker commits them
	// only when Err is nil.
	Emitted []onceq.Task
	// Writes are its State writes, in order; State the resulting values.
	// The worker commits them only when Err is nil.
	Writes []Write
	State  map[string][]byte
}

// SkipRetry reports whether Err is final (consumer.SkipRetry): the worker
// would dead-letter the task.
func (r *Result) SkipRetry() bool { return consumer.IsSkipRetry(r.Err) }

// RetryAfter returns the delay a consumer.RetryAfter in Err asks for, as
// asked (the worker caps it, see consumer.CapRetryDelay).
func (r *Result) RetryAfter() (time.Duration, bool) { return consumer.RetryDelay(r.Err) }

// Run builds a Task of task and runs h on it; see NewTask.
func Run(ctx context.Context, h consumer.Handler, task onceq.Task, opts ...Opt) *Result {
	return NewTask(task, opts...).Run(ctx, h)
}
