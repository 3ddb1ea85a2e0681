package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/onceq/onceq/control"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/internal/flow"
)

// State is where a workflow, or one of its steps, stands.
type State string

// The states of a workflow and of its steps.
const (
	StatePending   State = "pending"   // submitted: not started yet
	StateWaiting   State = "waiting"   // the workflow waits for its dependencies
	StateRunning   State = "running"   // some of it ran or runs
	StateSucceeded State = "succeeded" // every step succeeded
	StateFailed    State = "failed"    // a step failed for good: the workflow stopped there
	// StateCanceling: the workflow was canceled and has not ended yet: no
	// step starts from now on, and it ends failed at the first canceled
	// step (a delayed one when it comes due).
	StateCanceling State = "canceling"
	// StateSkipped is a step that never runs, as Step.Reason says: the
	// rest of a failed chain, the callback of a chord a member of which
	// failed, the OnSuccess callbacks of a failed step and the OnError
	// ones of a succeeded step.
	StateSkipped State = "skipped"
)

// Final reports whether a workflow, or a step, in state s is done.
func (s State) Final() bool { return s == StateSucceeded || s == StateFailed || s == StateSkipped }

// Status is what Get tells of a workflow: its state, where it stopped and
// why, its output, and every step.
type Status struct {
	ID    string
	State State
	// Reason says what a waiting workflow waits for, or which step failed
	// a failed one and why.
	Reason string
	// Output is a succeeded workflow's output: its last step's (Results
	// decodes a group's).
	Output []byte
	// Start is the record of the workflow's start task, in
	// onceq.WorkflowQueue (none while it is pending).
	Start *onceq.TaskRecord
	// Root is the workflow's shape with each step's state: nil while the
	// service has not seen the workflow yet (pending), or when it did not
	// start.
	Root *Step
}

// Step is a step of a workflow and its state.
type Step struct {
	// Kind is task, chain, group or chord.
	Kind string
	// Path is where the step sits: "" for the root, "1" for the second
	// step of a chain or member of a group, "1/0" within it, "2/cb" for a
	// chord's callback, "ok0" and "err0" for callbacks.
	Path  string
	State State
	// Reason says why a skipped step never runs.
	Reason string
	// Queue and ID name a task step; Record is its task record, nil while
	// it has none (pending).
	Queue, ID string
	Record    *onceq.TaskRecord
	// Steps are a chain's steps, a group's or a chord's members.
	Steps []Step
	// Callback is a chord's callback.
	Callback *Step
	// OnSuccess and OnError are the step's callbacks.
	OnSuccess, OnError []Step
}

// Get tells where workflow id stands, from the task records in the
// inspector's view: its start task's, then every step's.
func Get(ctx context.Context, in *inspect.Inspector, id string) (Status, error) {
	st := Status{ID: id, State: StatePending}
	rec, err := in.Get(ctx, onceq.WorkflowQueue, id)
	switch {
	case errors.Is(err, inspect.ErrNotFound), errors.Is(err, inspect.ErrNoQueue):
		return st, fmt.Errorf("workflow %s: %w", id, inspect.ErrNotFound)
	case err != nil:
		return st, err
	}
	st.Start = &rec
	switch rec.State {
	case onceq.StatePending, onceq.StateRunning:
		return st, nil // its start task runs: no step started yet
	case onceq.StateScheduled, onceq.StateRetrying:
		// Waiting: the service keeps its shape meanwhile, so its steps
		// show, none started.
		st.State, st.Reason = StateWaiting, rec.Error
		if rec.Result != nil {
			root, err := shapeStatus(ctx, in, id, rec.Result)
			st.Root = root
			if err != nil {
				return st, err
			}
		}
		return st, canceling(ctx, in, &st)
	case onceq.StateSucceeded:
	default:
		st.State, st.Reason = StateFailed, "the workflow did not start: "+string(rec.State)
		if rec.Error != "" {
			st.Reason += ": " + rec.Error
		}
		return st, nil
	}
	root, err := shapeStatus(ctx, in, id, rec.Result)
	if err != nil {
		return st, err
	}
	st.Root, st.State = root, root.State
	switch root.State {
	case StateFailed:
		st.Reason = failure(root)
	case StateSucceeded:
		st.Output = output(root)
	default:
		return st, canceling(ctx, in, &st)
	}
	return st, nil
}

// canceling tells a workflow canceled and not yet ended as such.
func canceling(ctx context.Context, in *inspect.Inspector, st *Status) error {
	canceled, err := in.CancelRequested(ctx, onceq.WorkflowQueue, st.ID)
	if err != nil || !canceled {
		return err
	}
	st.State, st.Reason = StateCanceling, "canceled: no step starts from now on; it ends failed at the first canceled step"
	return nil
}

// shapeStatus reads the records of the steps of the workflow whose shape
// is b.
func shapeStatus(ctx context.Context, in *inspect.Inspector, id string, b []byte) (*Step, error) {
	def, err := parseShape(b)
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w", id, err)
	}
	root, err := status(ctx, in, def.W, &def.Root, "")
	if err != nil {
		return nil, err
	}
	return &root, nil
}

// Cancel cancels workflow id and returns its status as of before the
// cancel. Workers read the cancel milliseconds after it is written; from
// then on no step of the workflow starts. One that has not started never
// does. In a running one, the steps running finish, and every other step,
// callbacks included, ends canceled when it comes to a worker, so the
// workflow ends failed at the first of them (a delayed step ends when it
// comes due). A workflow already done is left as it is: its status says
// so.
func Cancel(ctx context.Context, ctl *control.Controller, id string) (Status, error) {
	st, err := Get(ctx, ctl.Inspector(), id)
	if err != nil || st.State.Final() {
		return st, err
	}
	return st, ctl.CancelWorkflow(ctx, id)
}

// Wait returns the workflow's status once it succeeded or failed, waking
// on the task records of its steps as they finish.
func Wait(ctx context.Context, in *inspect.Inspector, id string) (Status, error) {
	for {
		st, err := Get(ctx, in, id)
		if err != nil && !errors.Is(err, inspect.ErrNotFound) {
			return st, err
		}
		if st.State.Final() {
			return st, nil
		}
		queue, task := onceq.WorkflowQueue, id // until it starts
		if st.Start != nil && st.Start.State == onceq.StateSucceeded && st.Root != nil {
			s := open(st.Root)
			if s == nil {
				continue // it just finished
			}
			queue, task = s.Queue, s.ID
		}
		if _, err := in.Wait(ctx, queue, task); err != nil {
			return st, err
		}
	}
}

// open returns a task step of s that has not finished and must before s
// can: the one to wait for.
func open(s *Step) *Step {
	switch {
	case s.State.Final():
		return nil
	case s.Kind == "task":
		return s
	}
	for i := range s.Steps {
		if o := open(&s.Steps[i]); o != nil {
			return o
		}
	}
	if s.Callback != nil {
		return open(s.Callback)
	}
	return nil
}

// status reads the records of node n's tasks and sums them up.
func status(ctx context.Context, in *inspect.Inspector, w string, n *flow.Node, path string) (Step, error) {
	s := Step{Kind: n.Kind(), Path: path}
	var err error
	switch {
	case n.Task != nil:
		s.Queue, s.ID, s.State = n.Task.Queue, n.Task.ID, StatePending
		if s.ID == "" {
			s.ID = deriveID(w, path)
		}
		rec, err := in.Get(ctx, s.Queue, s.ID)
		switch {
		case errors.Is(err, inspect.ErrNotFound), errors.Is(err, inspect.ErrNoQueue):
		case err != nil:
			return s, err
		default:
			s.Record, s.State = &rec, taskState(rec.State)
		}
	case n.Chain != nil:
		if s.Steps, err = statuses(ctx, in, w, n.Chain, path, ""); err != nil {
			return s, err
		}
		s.State = sequence(s.Steps)
	default:
		if s.Steps, err = statuses(ctx, in, w, n.Group, path, ""); err != nil {
			return s, err
		}
		s.State = parallel(s.Steps)
		if n.Callback != nil {
			cb, err := status(ctx, in, w, n.Callback, sub(path, "cb"))
			if err != nil {
				return s, err
			}
			s.Callback = &cb
			if s.State == StateSucceeded {
				s.State = cb.State
				if s.State == StatePending {
					s.State = StateRunning
				}
			}
		}
	}
	if s.OnSuccess, err = statuses(ctx, in, w, n.OnSuccess, path, "ok"); err != nil {
		return s, err
	}
	if s.OnError, err = statuses(ctx, in, w, n.OnError, path, "err"); err != nil {
		return s, err
	}
	markSkipped(&s)
	return s, nil
}

// markSkipped marks the steps below s that never run, now that s's state
// is known: they would show pending forever.
func markSkipped(s *Step) {
	if s.Kind == "chain" {
		for i := range s.Steps {
			if s.Steps[i].State == StateFailed {
				for j := i + 1; j < len(s.Steps); j++ {
					skip(&s.Steps[j], "not run: step "+s.Steps[i].Path+" failed before it")
				}
				break
			}
		}
	}
	if s.Callback != nil && parallel(s.Steps) == StateFailed {
		skip(s.Callback, "not run: a member of the chord failed")
	}
	switch s.State {
	case StateFailed:
		for i := range s.OnSuccess {
			skip(&s.OnSuccess[i], "not run: an OnSuccess callback, and the step failed")
		}
	case StateSucceeded:
		for i := range s.OnError {
			skip(&s.OnError[i], "not run: an OnError callback, and the step succeeded")
		}
	}
}

// skip marks s, and every step of it, skipped for why, if it has not
// started: a step with a record ran, or runs.
func skip(s *Step, why string) {
	if s.State != StatePending {
		return
	}
	s.State, s.Reason = StateSkipped, why
	for i := range s.Steps {
		skip(&s.Steps[i], why)
	}
	if s.Callback != nil {
		skip(s.Callback, why)
	}
	for i := range s.OnSuccess {
		skip(&s.OnSuccess[i], why)
	}
	for i := range s.OnError {
		skip(&s.OnError[i], why)
	}
}

func statuses(ctx context.Context, in *inspect.Inspector, w string, ns []flow.Node, path, prefix string) ([]Step, error) {
	if len(ns) == 0 {
		return nil, nil
	}
	out := make([]Step, len(ns))
	for i := range ns {
		var err error
		if out[i], err = status(ctx, in, w, &ns[i], sub(path, prefix+strconv.Itoa(i))); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func taskState(s onceq.TaskState) State {
	switch s {
	case onceq.StatePending:
		return StatePending
	case onceq.StateSucceeded:
		return StateSucceeded
	case onceq.StateDead, onceq.StateExpired, onceq.StateCanceled:
		return StateFailed
	}
	return StateRunning
}

// sequence is a chain's state: failed at its first failed step, done
// with its last.
func sequence(steps []Step) State {
	for i := range steps {
		switch steps[i].State {
		case StateFailed:
			return StateFailed
		case StateSucceeded:
			continue
		case StatePending:
			if i == 0 {
				return StatePending
			}
		}
		return StateRunning
	}
	return StateSucceeded
}

// parallel is a group's state: failed at any failed member, done with
// all of them.
func parallel(steps []Step) State {
	pending, succeeded := 0, 0
	for i := range steps {
		switch steps[i].State {
		case StateFailed:
			return StateFailed
		case StateSucceeded:
			succeeded++
		case StatePending:
			pending++
		}
	}
	switch len(steps) {
	case succeeded:
		return StateSucceeded
	case pending:
		return StatePending
	}
	return StateRunning
}

// failure says which task failed the step and why.
func failure(s *Step) string {
	if s.Kind == "task" {
		why := "step " + s.Path + " (task " + s.Queue + "/" + s.ID + ") " + string(s.Record.State)
		if s.Path == "" {
			why = "task " + s.Queue + "/" + s.ID + " " + string(s.Record.State)
		}
		if r := s.Record.Reason; r != "" && r != string(s.Record.State) {
			why += ": " + r // not "canceled: canceled"
		}
		if s.Record.Error != "" {
			why += ": " + s.Record.Error
		}
		return why
	}
	for i := range s.Steps {
		if s.Steps[i].State == StateFailed {
			return failure(&s.Steps[i])
		}
	}
	if s.Callback != nil && s.Callback.State == StateFailed {
		return failure(s.Callback)
	}
	return "failed"
}

// output is a succeeded step's output, as the step after it gets it.
func output(s *Step) []byte {
	switch s.Kind {
	case "task":
		return s.Record.Result
	case "chain":
		return output(&s.Steps[len(s.Steps)-1])
	case "chord":
		return output(s.Callback)
	}
	outs := make([][]byte, len(s.Steps))
	for i := range s.Steps {
		outs[i] = output(&s.Steps[i])
	}
	return flow.GroupOutput(outs)
}

// Results decodes a group's output (a chord callback's input, the input of
// the step after a group in a chain): each member's output, in member
// order.
func Results(input []byte) ([][]byte, error) { return flow.ParseGroupOutput(input) }

// Failure is what an OnError callback gets as its input (JSON): the
// workflow, and the step that failed it and why.
type Failure = flow.Failure

// ParseFailure decodes an OnError callback's input.
func ParseFailure(input []byte) (Failure, error) {
	var f Failure
	if err := json.Unmarshal(input, &f); err != nil {
		return f, fmt.Errorf("workflow: an OnError callback's input is a JSON object: %w", err)
	}
	return f, nil
}
