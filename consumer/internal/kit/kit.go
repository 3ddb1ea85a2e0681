// Package kit connects the test kit, package consumer/consumertest, to
// the executor of package consumer without exporting anything from
// consumer for tests: consumer provides its functions here when it is
// initialized, and consumertest, which imports consumer, calls them.
//
// The functions are generic in consumer's own types (its Task, Handler
// and Opt), which this package cannot name: consumer imports it.
package kit

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/dlq"
)

// Config places a task built by Funcs.NewTask.
type Config struct {
	// Topic, Partition and Offset locate the record the task comes from.
	Topic     string
	Partition int32
	Offset    int64
	// State holds the partition's committed values, as the checkpoint
	// would. The task never writes to it.
	State map[string][]byte
	// MaxMessageBytes, when positive, is the worker's MaxMessageBytes,
	// with MaxResultBytes lowered to what such a record holds.
	MaxMessageBytes int
}

// Write is one key's write by a task, as its commit writes it: Value nil
// for a delete.
type Write struct {
	Key, Value []byte
}

// Outcome is what a worker commits for one attempt of a task.
type Outcome struct {
	// State is the state its task record gets; empty when the run was
	// dropped (Err says why) or failed outside its handler.
	State onceq.TaskState
	// Err is the run's error as the worker saw it: the handler's, its
	// panic, its time-to-run passing, or why the attempt has no outcome.
	Err error
	// Emitted are the tasks written downstream: the handler's and its
	// workflow's continuation.
	Emitted []onceq.Task
	// Writes are the committed state writes.
	Writes []Write
	// Value is the result the task record keeps.
	Value []byte
	// Retry is the next attempt the worker schedules, or nil.
	Retry *onceq.Task
	// DeadLetter is the task's dead letter as package dlq reads it, or
	// nil.
	DeadLetter *dlq.Letter
}

// Funcs are package consumer's side of the kit. T is *consumer.Task, H
// consumer.Handler and O consumer.Opt.
type Funcs[T, H, O any] struct {
	// NewTask builds a task of a worker made with the options, which it
	// refuses as consumer.New does.
	NewTask func(task onceq.Task, c Config, opts []O) (T, error)
	// Emitted returns what the task emitted so far; Writes its state
	// writes so far, one per key.
	Emitted func(T) []onceq.Task
	Writes  func(T) []Write
	// Run runs one attempt of the task with h, as its worker does.
	Run func(ctx context.Context, h H, t T) Outcome
}

var funcs atomic.Value

// Provide records package consumer's functions; consumer calls it once,
// when it is initialized.
func Provide[T, H, O any](f Funcs[T, H, O]) { funcs.Store(f) }

// Get returns the functions package consumer provided.
func Get[T, H, O any]() Funcs[T, H, O] {
	f, ok := funcs.Load().(Funcs[T, H, O])
	if !ok {
		panic(fmt.Sprintf("kit: package consumer provided no functions of these types (%T)", funcs.Load()))
	}
	return f
}
