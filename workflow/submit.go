package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/flow"
	"github.com/onceq/onceq/producer"
)

// ErrInvalid is wrapped by the errors of a workflow that is refused before
// anything is submitted: Prepare's, Submit's and ParseLine's.
var ErrInvalid = errors.New("invalid workflow")

// Submit submits workflow n with ID id and returns the ID. An empty id
// gets a generated one, except for a single task with an ID, whose
// workflow is "<queue>/<task ID>" (a task submitted with dependencies).
//
// The workflow is one task of onceq.WorkflowQueue holding its definition,
// so submitting it is atomic; the workflow service starts it once its
// dependencies succeeded, emitting its first tasks in the transaction that
// ends the start task. A second Submit of the same ID within the workers'
// dedup window starts nothing more. Every step's task ID is its own or
// derived from id and the step's place (see Step.Path): "<id>/0",
// "<id>/1/2", "<id>/2/cb". The start task is recorded as pending at once
// (Tx.SubmitPending), so Get knows the workflow from the moment Submit
// returns.
//
// Every queue the workflow names must exist, or the producer must create
// queues (producer.CreateQueues).
func Submit(ctx context.Context, p *producer.Producer, id string, n Node) (string, error) {
	task, err := Prepare(id, n, p.MaxMessageBytes())
	if err != nil {
		return "", err
	}
	for _, q := range Queues(n) {
		if err := p.CheckQueue(ctx, q); err != nil {
			return "", fmt.Errorf("workflow %s: %w", task.ID, err)
		}
	}
	if err := p.Tx(ctx, func(tx *producer.Tx) error { return tx.SubmitPending(task) }); err != nil {
		return task.ID, fmt.Errorf("workflow %s: %w", task.ID, err)
	}
	return task.ID, nil
}

// Prepare checks workflow n and returns its start task: what Submit
// submits, for a caller that submits it in a transaction of its own (with
// Tx.SubmitPending, beside other tasks). maxMessageBytes is the broker's
// record limit (0: onceq.DefaultMaxMessageBytes).
func Prepare(id string, n Node, maxMessageBytes int) (onceq.Task, error) {
	return PrepareScoped("", id, n, maxMessageBytes)
}

// PrepareScoped is Prepare for a workflow of a scope, such as a namespace
// of onceq serve: its ID, given, default or generated, is kept as
// "<scope>/<ID>", so that no two scopes' workflows share an ID, nor the
// IDs of their joins and of the steps derived from it. scope holds no
// '/' (or is "": Prepare).
func PrepareScoped(scope, id string, n Node, maxMessageBytes int) (onceq.Task, error) {
	prefix := ""
	if scope != "" {
		if strings.Contains(scope, "/") {
			return onceq.Task{}, fmt.Errorf("%w: scope %q: a scope holds no '/'", ErrInvalid, scope)
		}
		prefix = scope + "/"
	}
	generated := false
	if id == "" {
		id = defaultID(prefix, n)
	}
	if id == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return onceq.Task{}, fmt.Errorf("workflow: generating an ID: %w", err)
		}
		id, generated = u.String(), true
	}
	id = prefix + id
	def, err := compile(id, n, maxMessageBytes)
	if err != nil {
		return onceq.Task{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	payload, err := flow.Message{Start: &def}.Encode()
	if err != nil {
		return onceq.Task{}, err
	}
	if shape, err := shapeOf(&def); err != nil {
		return onceq.Task{}, err
	} else if len(shape) > MaxDefinitionBytes {
		return onceq.Task{}, fmt.Errorf("%w: workflow %s: its shape (queues and IDs of its steps) is %d bytes, over %d: split it into workflows that depend on each other", ErrInvalid, id, len(shape), MaxDefinitionBytes)
	}
	t := onceq.Task{Queue: onceq.WorkflowQueue, ID: id, GeneratedID: generated, Payload: payload,
		// The service snoozes a workflow that waits, which counts no
		// attempt; these are for the service's own failures.
		MaxAttempts: 10}
	if err := t.Validate(maxMessageBytes); err != nil {
		return onceq.Task{}, fmt.Errorf("%w: workflow %s: its definition does not fit a record: %w", ErrInvalid, id, err)
	}
	return t, nil
}

// Queues lists the queues of n's tasks, each once: every one must exist
// (or the producer create queues) for the workflow to start.
func Queues(n Node) []string {
	var qs []string
	n.each(func(x *Node) {
		if x.kind == kindTask && !slices.Contains(qs, x.task.Queue) {
			qs = append(qs, x.task.Queue)
		}
	})
	return qs
}

// Payloads lists the payload sizes of n's tasks: a front end bounds each
// as it bounds a task's.
func Payloads(n Node) []int {
	var out []int
	n.each(func(x *Node) {
		if x.kind == kindTask {
			out = append(out, len(x.task.Payload))
		}
	})
	return out
}

// each calls fn for n and every node below it.
func (n *Node) each(fn func(*Node)) {
	fn(n)
	for _, ns := range [][]Node{n.steps, n.callback, n.onSuccess, n.onError} {
		for i := range ns {
			ns[i].each(fn)
		}
	}
}

// defaultID is the ID of a workflow that is one task with an ID:
// "<queue>/<task ID>", if it fits after prefix.
func defaultID(prefix string, n Node) string {
	if n.kind != kindTask || n.task.ID == "" {
		return ""
	}
	id := n.task.Queue + "/" + n.task.ID
	if ValidateID(prefix+id) != nil {
		return ""
	}
	return id
}

// shapeOf is a started workflow's shape: its definition without its
// tasks' payloads, keys and headers, and without the IDs it derived (Get
// derives them again). The start task keeps it as its result.
func shapeOf(def *flow.Definition) ([]byte, error) {
	d := flow.Definition{W: def.W, Root: shapeNode(&def.Root), After: def.After}
	return json.Marshal(d)
}

func shapeNode(n *flow.Node) flow.Node {
	out := flow.Node{Join: n.Join}
	if n.Task != nil {
		s := flow.Step{Queue: n.Task.Queue, ID: n.Task.ID, Generated: n.Task.Generated}
		if s.Generated {
			s.ID = ""
		}
		out.Task = &s
	}
	out.Chain, out.Group = shapeNodes(n.Chain), shapeNodes(n.Group)
	if n.Callback != nil {
		cb := shapeNode(n.Callback)
		out.Callback = &cb
	}
	out.OnSuccess, out.OnError = shapeNodes(n.OnSuccess), shapeNodes(n.OnError)
	return out
}

func shapeNodes(ns []flow.Node) []flow.Node {
	if ns == nil {
		return nil
	}
	out := make([]flow.Node, len(ns))
	for i := range ns {
		out[i] = shapeNode(&ns[i])
	}
	return out
}

// parseShape reads a shape.
func parseShape(b []byte) (flow.Definition, error) {
	var d flow.Definition
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("the workflow's shape: %w", err)
	}
	return d, nil
}

// Of returns the ID of the workflow task t is a step of, from its
// onceq-workflow header; ok is false for a task outside workflows.
func Of(t *onceq.Task) (id string, ok bool) {
	if len(t.Workflow) == 0 {
		return "", false
	}
	c, err := flow.Decode(t.Workflow)
	if err != nil {
		return "", false
	}
	return c.W, true
}
