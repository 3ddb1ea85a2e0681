package consumer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/tracing"
)

// Handler runs one task. A nil error commits the task's effects (state
// writes and emitted tasks) together with its offset; an error discards
// them and the task runs again.
//
// External side effects (an e-mail, an HTTP call) are at-least-once by
// nature: a task may run again after a crash before its commit. Use
// Task.ID as the idempotency key for them.
type Handler interface {
	Handle(ctx context.Context, t *Task) error
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, t *Task) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, t *Task) error { return f(ctx, t) }

// Middleware wraps a Handler, as net/http middleware wraps a handler.
type Middleware func(Handler) Handler

// Chain wraps h in the middleware, the first one outermost.
func Chain(h Handler, mw ...Middleware) Handler {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}

// Task is a task being handled: the decoded onceq task, where it came
// from, its partition's state and the tasks it emits.
type Task struct {
	onceq.Task
	// Topic, Partition and Offset locate the record the task came from.
	Topic     string
	Partition int32
	Offset    int64

	state State
	emits []onceq.Task
	w     *Worker
	it    *item // the run's record (nil outside a worker's slots)
	run   *handlerRun
	// started and ended bound its handler's run: ended is the time its
	// result carries.
	started, ended time.Time
	// result is what SetResult set (nil: none).
	result []byte
	// trace is the context of the run's span, and span the span, when
	// the task's headers carry a trace (both nil otherwise): emitted tasks
	// and a workflow's next steps carry it on.
	trace context.Context
	span  trace.Span
}

// YieldQueuePlace gives the task's place under MaxRunningPerQueue to the
// next task of its queue while its handler runs on: for a handler that
// spends its run waiting on something outside the worker (onceq serve's,
// once an HTTP consumer took its job, until the ACK). The task still holds
// its slot (Concurrency) until its handler returns. Later calls, and calls
// without a MaxRunningPerQueue, do nothing.
func (t *Task) YieldQueuePlace() {
	if t.w == nil || t.it == nil || t.w.sched.bound == nil {
		return
	}
	if next := t.w.sched.bound.done(t.it); next != nil {
		t.w.sched.send(next)
	}
}

// ErrResultTooLarge is returned by SetResult for a result over the
// worker's MaxResultBytes.
var ErrResultTooLarge = errors.New("consumer: result too large")

// SetResult sets what the task returns: its task record keeps it with the
// succeeded state, for inspect.Get and Wait (and "onceq task get") to
// show, for the worker's ResultRetention. It is committed with the task's
// other effects; a run that fails discards it. A later call replaces it.
// A result over MaxResultBytes is refused with ErrResultTooLarge, and the
// task keeps the result it had.
func (t *Task) SetResult(b []byte) error {
	limit := DefaultMaxResultBytes
	if t.w != nil {
		limit = t.w.cfg.maxResultBytes
	}
	if len(b) > limit {
		return fmt.Errorf("%w: task %q: %d bytes, over the limit of %d: store large results elsewhere and return where (raise it with --max-result-bytes)",
			ErrResultTooLarge, t.ID, len(b), limit)
	}
	t.result = append(make([]byte, 0, len(b)), b...)
	return nil
}

// Result returns what SetResult set, or nil.
func (t *Task) Result() []byte { return t.result }

// State returns the task's view of its partition's state. Writes are
// committed atomically with the task, or discarded with it.
func (t *Task) State() *State { return &t.state }

// Emit writes a task in the same Kafka transaction as this task's commit,
// so it exists exactly once downstream. A task without an ID gets one
// derived from this task's ID, the same on every run of this task, so that
// downstream deduplication holds across retries. A task with a Due or
// Delay in the future goes through the delay buckets. When this task is
// traced (its headers carry a traceparent), the emitted task's traceparent
// names this run's span.
func (t *Task) Emit(out onceq.Task) error {
	maxBytes := onceq.DefaultMaxMessageBytes
	if t.w != nil {
		maxBytes = t.w.cfg.maxMessageBytes
	}
	if err := out.Validate(maxBytes); err != nil {
		return fmt.Errorf("consumer: emit from task %q: %w", t.ID, err)
	}
	if out.ID == "" {
		out.ID = t.ID + "/" + strconv.Itoa(len(t.emits))
		if len(out.ID) > onceq.MaxIDLen {
			return fmt.Errorf("consumer: emit from task %q: derived ID is over %d bytes: give the emitted task an ID", t.ID, onceq.MaxIDLen)
		}
		// Under exactly-once the commit writes it once: no client can
		// submit it again, so it needs no idempotency mark downstream.
		// At-least-once may write it twice after a crash.
		out.GeneratedID = t.w == nil || t.w.cfg.guarantee == ExactlyOnce
	}
	if t.trace != nil {
		// The emitted task is this run's doing, whatever trace the
		// headers it copied named.
		out.Headers = tracing.Set(t.trace, out.Headers)
	}
	t.emits = append(t.emits, out.Clone())
	return nil
}

// State is a partition's key-value state as one task sees it: committed
// values, overlaid by the writes of tasks completed but not yet committed,
// overlaid by this task's own writes.
//
// Under AtLeastOnce there is no checkpoint: State lives in memory only,
// per partition, and starts empty whenever the partition is assigned.
//
// State is scoped to the partition. Tasks of different keys in one
// partition run concurrently: derive state keys from the task's key (or ID)
// so that concurrent tasks never write the same state key.
type State struct {
	ps     *partState
	writes []stateWrite
	byKey  map[string]int // indexes writes once there are many
}

type stateWrite struct {
	key   []byte
	value []byte // nil: delete
}

// Get returns the value of key.
func (s *State) Get(key []byte) ([]byte, bool, error) {
	if i := s.written(key); i >= 0 {
		v := s.writes[i].value
		return v, v != nil, nil
	}
	if s.ps == nil {
		// A Task built outside a worker has its own writes alone.
		return nil, false, nil
	}
	if v, ok, found := s.ps.overlayGet(key); found {
		return v, ok, nil
	}
	if s.ps.store == nil {
		// At-least-once: the overlay is the partition's whole state.
		return nil, false, nil
	}
	return s.ps.store.Get(s.ps.tp, key)
}

// Set writes key = value. A nil value is stored as empty.
func (s *State) Set(key, value []byte) {
	if value == nil {
		value = []byte{}
	}
	s.put(key, value)
}

// Delete removes key.
func (s *State) Delete(key []byte) { s.put(key, nil) }

func (s *State) put(key, value []byte) {
	k := append([]byte{}, key...)
	var v []byte
	if value != nil {
		v = append([]byte{}, value...)
	}
	if i := s.written(k); i >= 0 {
		s.writes[i].value = v
		return
	}
	s.writes = append(s.writes, stateWrite{key: k, value: v})
	switch n := len(s.writes); {
	case n > maxScannedWrites && s.byKey == nil:
		s.byKey = make(map[string]int, 2*n)
		for i, w := range s.writes {
			s.byKey[string(w.key)] = i
		}
	case s.byKey != nil:
		s.byKey[string(k)] = n - 1
	}
}

// maxScannedWrites is how many writes of a task State looks through
// before it indexes them: most tasks write a key or two, and a map for
// those cost more than the scan.
const maxScannedWrites = 8

// written returns the index of key's write by this task, or -1.
func (s *State) written(key []byte) int {
	if s.byKey != nil {
		if i, ok := s.byKey[string(key)]; ok {
			return i
		}
		return -1
	}
	for i, w := range s.writes {
		if bytes.Equal(w.key, key) {
			return i
		}
	}
	return -1
}

// Counter is a helper over State: it reads key as a decimal counter, adds
// delta, writes it back and returns the new value.
func (s *State) Counter(key []byte, delta int64) (int64, error) {
	v, ok, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	var n int64
	if ok && len(v) > 0 {
		if n, err = strconv.ParseInt(string(v), 10, 64); err != nil {
			return 0, fmt.Errorf("consumer: state %q is not a counter: %w", key, err)
		}
	}
	n += delta
	s.Set(key, []byte(strconv.FormatInt(n, 10)))
	return n, nil
}

// sinceDue is the time from when the task could first run to now.
func sinceDue(t *onceq.Task, now time.Time) time.Duration {
	from := t.Due
	if from.IsZero() {
		from = t.Enqueued
	}
	if from.IsZero() {
		return 0
	}
	return now.Sub(from)
}
