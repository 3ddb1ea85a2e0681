// Package flow is the engine of workflows: the shape of a workflow (a
// tree of tasks, chains, groups and chords), what a task of one carries
// in its onceq-workflow header (its continuation), and what to emit when
// a step ends.
//
// A continuation is a stack of frames, innermost first, read when the task
// that carries it ends for good:
//
//   - then: the chain's remaining steps. On success the next one starts
//     with the output as its input; on failure the chain stops.
//   - join: the task is member i of n of a group. Its outcome is reported
//     to the workflow service (onceq.WorkflowQueue), keyed by the join, with
//     the frames below the join; the service continues them once, when the
//     last member reported, or at the first failure.
//   - callbacks: OnSuccess or OnError steps of the node the frame belongs
//     to, started with the output or the failure, beside the rest.
//
// Everything here is a pure function of its input: a worker calls Finish
// in the transaction of a task's outcome, and the workflow service calls
// Start and Finish in the transaction of the record it handles, so every
// step is emitted exactly once.
package flow

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/onceq/onceq"
)

// Step is a task of a workflow as the workflow carries it until it
// starts: what onceq.Task holds before submission resolves it.
type Step struct {
	Queue       string         `json:"queue"`
	ID          string         `json:"id,omitempty"`
	Generated   bool           `json:"generated,omitempty"` // the ID was derived, not a client's
	Key         []byte         `json:"key,omitempty"`
	Payload     []byte         `json:"payload,omitempty"`
	Headers     []onceq.Header `json:"headers,omitempty"`
	DelayMS     int64          `json:"delay_ms,omitempty"` // from when the step starts
	DueMS       int64          `json:"due_ms,omitempty"`
	ExpiresMS   int64          `json:"expires_ms,omitempty"`
	MaxAttempts int            `json:"max_attempts,omitempty"`
	TimeoutMS   int64          `json:"timeout_ms,omitempty"`
	Backoff     string         `json:"backoff,omitempty"`
}

// StepOf is the step of a task.
func StepOf(t *onceq.Task) *Step {
	s := &Step{Queue: t.Queue, ID: t.ID, Generated: t.GeneratedID, Key: t.Key, Payload: t.Payload, Headers: t.Headers,
		DelayMS: t.Delay.Milliseconds(), MaxAttempts: t.MaxAttempts, TimeoutMS: t.Timeout.Milliseconds()}
	if !t.Due.IsZero() {
		s.DueMS = t.Due.UnixMilli()
	}
	if !t.Expires.IsZero() {
		s.ExpiresMS = t.Expires.UnixMilli()
	}
	if !t.Backoff.IsZero() {
		s.Backoff = onceq.FormatBackoff(t.Backoff)
	}
	return s
}

// Task is the step as a task to submit.
func (s *Step) Task() (onceq.Task, error) {
	t := onceq.Task{Queue: s.Queue, ID: s.ID, GeneratedID: s.Generated, Key: s.Key, Payload: s.Payload, Headers: s.Headers,
		Delay: time.Duration(s.DelayMS) * time.Millisecond, MaxAttempts: s.MaxAttempts, Timeout: time.Duration(s.TimeoutMS) * time.Millisecond}
	if s.DueMS != 0 {
		t.Due = time.UnixMilli(s.DueMS)
	}
	if s.ExpiresMS != 0 {
		t.Expires = time.UnixMilli(s.ExpiresMS)
	}
	if s.Backoff != "" {
		b, err := onceq.ParseBackoff(s.Backoff)
		if err != nil {
			return onceq.Task{}, err
		}
		t.Backoff = b
	}
	return t, nil
}

// Node is a step of a workflow: exactly one of a task, a chain, a group,
// or a chord (a group with a callback), with optional callbacks.
type Node struct {
	Task  *Step  `json:"task,omitempty"`
	Chain []Node `json:"chain,omitempty"`
	Group []Node `json:"group,omitempty"`
	// Callback with Group is a chord: it starts once every member
	// succeeded, with their outputs.
	Callback *Node `json:"callback,omitempty"`
	// Join is a group's join ID, unique in the workflow: its members
	// report to it.
	Join      string `json:"join,omitempty"`
	OnSuccess []Node `json:"on_success,omitempty"`
	OnError   []Node `json:"on_error,omitempty"`
}

// Kind names what the node is.
func (n *Node) Kind() string {
	switch {
	case n.Task != nil:
		return "task"
	case n.Chain != nil:
		return "chain"
	case n.Callback != nil:
		return "chord"
	case n.Group != nil:
		return "group"
	}
	return ""
}

// Frame is one level of a continuation; exactly one of its parts is set.
type Frame struct {
	Then      []Node   `json:"then,omitempty"`
	Join      *JoinRef `json:"join,omitempty"`
	OnSuccess []Node   `json:"ok,omitempty"`
	OnError   []Node   `json:"err,omitempty"`
}

// JoinRef is a group member's place in its join.
type JoinRef struct {
	ID string `json:"id"`
	I  int    `json:"i"`
	N  int    `json:"n"`
}

// Cont is the value of the onceq-workflow header: the workflow's ID and
// the frames, innermost first.
type Cont struct {
	W      string  `json:"w"`
	Frames []Frame `json:"k,omitempty"`
}

// MaxContBytes bounds a continuation when it is decoded.
const MaxContBytes = onceq.DefaultMaxMessageBytes

// Decode reads an onceq-workflow header.
func Decode(b []byte) (Cont, error) {
	var c Cont
	if len(b) > MaxContBytes {
		return c, fmt.Errorf("workflow continuation of %d bytes, over %d", len(b), MaxContBytes)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("workflow continuation: %w", err)
	}
	if c.W == "" {
		return c, errors.New("workflow continuation: no workflow ID")
	}
	for i := range c.Frames {
		if err := c.Frames[i].check(); err != nil {
			return c, fmt.Errorf("workflow continuation: frame %d: %w", i, err)
		}
	}
	return c, nil
}

func (f *Frame) check() error {
	parts := 0
	if len(f.Then) > 0 {
		parts++
		for i := range f.Then {
			if err := f.Then[i].Check(); err != nil {
				return err
			}
		}
	}
	if f.Join != nil {
		parts++
		if f.Join.ID == "" || f.Join.N < 1 || f.Join.I < 0 || f.Join.I >= f.Join.N {
			return fmt.Errorf("join %q: member %d of %d", f.Join.ID, f.Join.I, f.Join.N)
		}
	}
	if len(f.OnSuccess)+len(f.OnError) > 0 {
		parts++
		for _, ns := range [][]Node{f.OnSuccess, f.OnError} {
			for i := range ns {
				if err := ns[i].Check(); err != nil {
					return err
				}
			}
		}
	}
	if parts != 1 {
		return errors.New("want exactly one of then (with steps), join and callbacks")
	}
	return nil
}

// Check checks a node's shape: one kind, tasks with a queue and an ID,
// groups with members and a join ID.
func (n *Node) Check() error {
	kinds := 0
	for _, set := range []bool{n.Task != nil, n.Chain != nil, n.Group != nil} {
		if set {
			kinds++
		}
	}
	switch {
	case kinds != 1:
		return errors.New("a node is exactly one of a task, a chain, a group or a chord")
	case n.Callback != nil && n.Group == nil:
		return errors.New("a callback belongs to a group (a chord)")
	case n.Task != nil && (n.Task.Queue == "" || n.Task.ID == ""):
		return errors.New("a task of a workflow has a queue and an ID")
	case n.Chain != nil && len(n.Chain) == 0:
		return errors.New("a chain has steps")
	case n.Group != nil && (len(n.Group) == 0 || n.Join == ""):
		return errors.New("a group has members and a join ID")
	}
	for _, ns := range [][]Node{n.Chain, n.Group, n.OnSuccess, n.OnError} {
		for i := range ns {
			if err := ns[i].Check(); err != nil {
				return err
			}
		}
	}
	if n.Callback != nil {
		return n.Callback.Check()
	}
	return nil
}

// Outcome is how a step ended: its output on success, or its failure.
type Outcome struct {
	OK     bool
	Output []byte
	Fail   *Failure
}

// Failure is the step that failed a workflow and why: what OnError
// callbacks get as their input, as JSON.
type Failure struct {
	Workflow string          `json:"workflow"`
	ID       string          `json:"id"`
	Queue    string          `json:"queue"`
	State    onceq.TaskState `json:"state"`
	Reason   string          `json:"reason,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// Succeeded is a success with output.
func Succeeded(output []byte) Outcome { return Outcome{OK: true, Output: output} }

// Failed is the failure of a step.
func Failed(f Failure) Outcome { return Outcome{Fail: &f} }

// Start returns the tasks that start node n of workflow w with input,
// followed by the frames k.
func Start(w string, n *Node, input []byte, k []Frame) ([]onceq.Task, error) {
	return start(nil, w, n, input, k)
}

func start(out []onceq.Task, w string, n *Node, input []byte, k []Frame) ([]onceq.Task, error) {
	if n.OnSuccess != nil || n.OnError != nil {
		k = push(k, Frame{OnSuccess: n.OnSuccess, OnError: n.OnError})
	}
	switch {
	case n.Task != nil:
		t, err := n.Task.Task()
		if err != nil {
			return nil, fmt.Errorf("step %s: %w", n.Task.ID, err)
		}
		t.Input = input
		t.Workflow, err = json.Marshal(Cont{W: w, Frames: k})
		if err != nil {
			return nil, err
		}
		return append(out, t), nil
	case n.Callback != nil:
		group := Node{Group: n.Group, Join: n.Join}
		return start(out, w, &group, input, push(k, Frame{Then: []Node{*n.Callback}}))
	case n.Chain != nil:
		if len(n.Chain) > 1 {
			k = push(k, Frame{Then: n.Chain[1:]})
		}
		return start(out, w, &n.Chain[0], input, k)
	case n.Group != nil:
		var err error
		for i := range n.Group {
			mk := push(k, Frame{Join: &JoinRef{ID: n.Join, I: i, N: len(n.Group)}})
			if out, err = start(out, w, &n.Group[i], input, mk); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, errors.New("an empty node")
}

// push returns k with f on top, sharing nothing with k's array.
func push(k []Frame, f Frame) []Frame {
	out := make([]Frame, 0, len(k)+1)
	return append(append(out, f), k...)
}

// Finish returns what to emit when a step of workflow w, whose
// continuation is the frames k, ended with o: the next steps, callbacks,
// or a report to the step's join.
func Finish(w string, k []Frame, o Outcome) ([]onceq.Task, error) {
	var out []onceq.Task
	for i := range k {
		f := &k[i]
		switch {
		case f.Then != nil:
			if !o.OK {
				continue // the chain stops
			}
			rest := k[i+1:]
			if len(f.Then) > 1 {
				rest = push(rest, Frame{Then: f.Then[1:]})
			}
			return start(out, w, &f.Then[0], o.Output, rest)
		case f.Join != nil:
			r, err := report(w, f.Join, o, k[i+1:])
			if err != nil {
				return nil, err
			}
			return append(out, r), nil
		default:
			cbs, input := f.OnSuccess, o.Output
			if !o.OK {
				cbs = f.OnError
				var err error
				if input, err = json.Marshal(o.Fail); err != nil {
					return nil, err
				}
			}
			for j := range cbs {
				var err error
				if out, err = start(out, w, &cbs[j], input, nil); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

// FinishTask is Finish for a task that carries the continuation cont.
func FinishTask(cont []byte, o Outcome) ([]onceq.Task, error) {
	c, err := Decode(cont)
	if err != nil {
		return nil, err
	}
	if o.Fail != nil && o.Fail.Workflow == "" {
		f := *o.Fail
		f.Workflow = c.W
		o.Fail = &f
	}
	return Finish(c.W, c.Frames, o)
}

// Report is a group member's outcome, as the workflow service gets it in
// a Message: the payload of a task of onceq.WorkflowQueue keyed by the
// join.
type Report struct {
	W      string   `json:"w"`
	Join   JoinRef  `json:"join"`
	OK     bool     `json:"ok"`
	Output []byte   `json:"output,omitempty"`
	Fail   *Failure `json:"fail,omitempty"`
	// Rest is the continuation below the join: the same for every member.
	Rest []Frame `json:"k,omitempty"`
}

// ReportID is the task ID of member i's report to join: a workflow ID
// holds no '#', so it never meets a workflow's own ID.
func ReportID(join string, i int) string { return join + "#" + strconv.Itoa(i) }

func report(w string, j *JoinRef, o Outcome, rest []Frame) (onceq.Task, error) {
	v, err := Message{Report: &Report{W: w, Join: *j, OK: o.OK, Output: o.Output, Fail: o.Fail, Rest: rest}}.Encode()
	if err != nil {
		return onceq.Task{}, err
	}
	// Written once, in the transaction of the member's outcome: not an
	// idempotency key (the join counts each member once anyway).
	return onceq.Task{Queue: onceq.WorkflowQueue, ID: ReportID(j.ID, j.I), GeneratedID: true, Key: []byte(j.ID), Payload: v}, nil
}

// GroupOutput is a group's output: a JSON array of its members' outputs
// in member order, each in standard base64.
func GroupOutput(outputs [][]byte) []byte {
	if outputs == nil {
		outputs = [][]byte{}
	}
	b, _ := json.Marshal(outputs) // [][]byte never fails
	return b
}

// ParseGroupOutput reads a group's output.
func ParseGroupOutput(b []byte) ([][]byte, error) {
	var out [][]byte
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("workflow: a group's output is a JSON array of base64 strings: %w", err)
	}
	return out, nil
}
