package workflow

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/flow"
)

// Node is a step of a workflow: a task, a chain, a group or a chord,
// with optional callbacks. Build one with Task, Chain, Group and Chord;
// the zero Node is none. Nodes are values: OnSuccess, OnError and After
// return a changed copy.
type Node struct {
	kind      kind
	task      onceq.Task
	steps     []Node // chain steps, group members
	callback  []Node // a chord's callback (one)
	onSuccess []Node
	onError   []Node
	after     []Ref
}

type kind uint8

const (
	kindNone kind = iota
	kindTask
	kindChain
	kindGroup
	kindChord
)

// Ref names a task by its queue and ID: a dependency (Node.After).
type Ref struct {
	Queue string
	ID    string
}

func (r Ref) String() string { return r.Queue + "/" + r.ID }

// Task is a step that runs one task. Its ID, if empty, is derived from the
// workflow's ID and the step's place ("<workflow>/<index>/...": see
// Submit); a task of its own ID is an idempotency key as usual. Delay is
// counted from when the step starts, Due and Expires are absolute.
func Task(t onceq.Task) Node { return Node{kind: kindTask, task: t.Clone()} }

// Chain runs its steps one after another: each starts when the one before
// it succeeded, with that step's output as its input (Input on the
// worker's task; the output of a group or chord is its members' results,
// see Results). A step that fails for good stops the chain.
func Chain(steps ...Node) Node { return Node{kind: kindChain, steps: clone(steps)} }

// Group runs its members in parallel. Its output, for the step after it in
// a chain and for OnSuccess, is every member's output in member order
// (Results decodes it). It fails at its first member that fails for good;
// the rest run on.
func Group(members ...Node) Node { return Node{kind: kindGroup, steps: clone(members)} }

// Chord runs a group, then callback once, with the members' results, when
// the last member succeeded, whatever the order they finish in, crashes
// and retries included. group must be a Group. If a member fails for good
// the callback does not run and the chord fails.
func Chord(group Node, callback Node) Node {
	n := Node{kind: kindChord, steps: clone(group.steps), callback: []Node{callback}}
	if group.kind != kindGroup {
		n.steps = nil // refused by Submit, which names the mistake
	}
	n.onSuccess, n.onError = group.onSuccess, group.onError
	return n
}

// OnSuccess adds callbacks that start, with the node's output as their
// input, in the transaction of the outcome that completes the node. Their
// own outcome does not change the workflow's.
func (n Node) OnSuccess(callbacks ...Node) Node {
	n.onSuccess = append(clone(n.onSuccess), callbacks...)
	return n
}

// OnError adds callbacks that start when the node fails for good, with
// the failure as their input (a JSON object: see Failure), in the
// transaction of the outcome that failed it.
func (n Node) OnError(callbacks ...Node) Node {
	n.onError = append(clone(n.onError), callbacks...)
	return n
}

// After makes the node wait until every task named has succeeded,
// whichever was submitted first; if one of them fails for good (dead,
// expired, canceled) the node's first tasks end canceled, with that as
// the reason, and its OnError callbacks run. Only the node submitted (the
// workflow's root) may have dependencies. A dependency on a task that was
// never submitted waits until the workflow is canceled.
func (n Node) After(deps ...Ref) Node {
	n.after = append(append([]Ref{}, n.after...), deps...)
	return n
}

func clone(ns []Node) []Node {
	if ns == nil {
		return nil
	}
	return append([]Node{}, ns...)
}

// Limits of a workflow.
const (
	// MaxIDLen is the longest workflow ID: the IDs derived from it for its
	// steps and joins must fit onceq.MaxIDLen.
	MaxIDLen = 200
	// MaxSteps bounds the tasks of one workflow, callbacks included.
	MaxSteps = 100_000
)

// ValidateID checks a workflow ID: a task ID (printable ASCII) of at
// most MaxIDLen bytes, without '#' (the workflow service's joins use it).
func ValidateID(id string) error {
	if err := onceq.ValidateID(id); err != nil {
		return err
	}
	switch {
	case len(id) > MaxIDLen:
		return fmt.Errorf("workflow ID %q: %d bytes, at most %d, so that the IDs derived from it fit", id, len(id), MaxIDLen)
	case strings.Contains(id, "#"):
		return fmt.Errorf("workflow ID %q: '#' is reserved for the workflow service's joins: choose an ID without it", id)
	}
	return nil
}

// compiler turns a Node into the flow form the service and the workers
// run: every task with its ID and every group with its join.
type compiler struct {
	w        string
	maxBytes int
	steps    int
	ids      map[Ref]string // a task's ID in its queue -> its step path
}

// compile checks n and builds the definition of workflow w.
func compile(w string, n Node, maxBytes int) (flow.Definition, error) {
	if err := ValidateID(w); err != nil {
		return flow.Definition{}, err
	}
	c := &compiler{w: w, maxBytes: maxBytes, ids: map[Ref]string{}}
	root, err := c.node(n, "")
	if err != nil {
		return flow.Definition{}, err
	}
	def := flow.Definition{W: w, Root: root}
	for _, d := range n.after {
		if err := onceq.ValidateAnyQueue(d.Queue); err != nil {
			return flow.Definition{}, fmt.Errorf("workflow %s: dependency %s: %w", w, d, err)
		}
		if err := onceq.ValidateID(d.ID); err != nil {
			return flow.Definition{}, fmt.Errorf("workflow %s: dependency %s: %w", w, d, err)
		}
		if _, own := c.ids[d]; own {
			return flow.Definition{}, fmt.Errorf("workflow %s: dependency %s is a step of the workflow itself: a cycle", w, d)
		}
		def.After = append(def.After, flow.Ref{Queue: d.Queue, ID: d.ID})
	}
	return def, nil
}

// where names a step for messages: "step 2.0" (the first member of the
// third step), "the workflow" for the root.
func where(path string) string {
	if path == "" {
		return "the workflow's root"
	}
	return "step " + strings.ReplaceAll(path, "/", ".")
}

func sub(path, part string) string {
	if path == "" {
		return part
	}
	return path + "/" + part
}

// deriveID is the ID of workflow w's task at path that was given none:
// the workflow's own ID for its root, "<w>/<path>" below it. A group's
// join has the same ID as its place.
func deriveID(w, path string) string {
	if path == "" {
		return w
	}
	return w + "/" + path
}

func (c *compiler) derive(path string) string { return deriveID(c.w, path) }

func (c *compiler) node(n Node, path string) (flow.Node, error) {
	if len(n.after) > 0 && path != "" {
		return flow.Node{}, fmt.Errorf("workflow %s: %s: only the workflow's root waits for dependencies (After)", c.w, where(path))
	}
	var out flow.Node
	var err error
	switch n.kind {
	case kindTask:
		out.Task, err = c.task(n.task, path)
	case kindChain:
		if len(n.steps) == 0 {
			return out, fmt.Errorf("workflow %s: %s: a chain needs at least one step", c.w, where(path))
		}
		out.Chain, err = c.nodes(n.steps, path, "")
	case kindGroup, kindChord:
		if len(n.steps) == 0 {
			what := "a group needs at least one member"
			if n.kind == kindChord {
				what = "a chord's first argument is a Group with at least one member"
			}
			return out, fmt.Errorf("workflow %s: %s: %s", c.w, where(path), what)
		}
		out.Join = c.derive(path)
		if out.Group, err = c.nodes(n.steps, path, ""); err != nil {
			return out, err
		}
		if n.kind == kindChord {
			var cb flow.Node
			cb, err = c.node(n.callback[0], sub(path, "cb"))
			out.Callback = &cb
		}
	default:
		return out, fmt.Errorf("workflow %s: %s is an empty Node: build it with Task, Chain, Group or Chord", c.w, where(path))
	}
	if err != nil {
		return out, err
	}
	if out.OnSuccess, err = c.nodes(n.onSuccess, path, "ok"); err != nil {
		return out, err
	}
	out.OnError, err = c.nodes(n.onError, path, "err")
	return out, err
}

func (c *compiler) nodes(ns []Node, path, prefix string) ([]flow.Node, error) {
	if len(ns) == 0 {
		return nil, nil
	}
	out := make([]flow.Node, len(ns))
	for i := range ns {
		var err error
		if out[i], err = c.node(ns[i], sub(path, prefix+strconv.Itoa(i))); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (c *compiler) task(t onceq.Task, path string) (*flow.Step, error) {
	if c.steps++; c.steps > MaxSteps {
		return nil, fmt.Errorf("workflow %s: more than %d tasks: split it into workflows that depend on each other", c.w, MaxSteps)
	}
	switch {
	case t.Queue == onceq.WorkflowQueue:
		return nil, fmt.Errorf("workflow %s: %s: queue %s is the workflow service's: a step runs in a queue of yours", c.w, where(path), onceq.WorkflowQueue)
	case len(t.Workflow) > 0 || t.Input != nil || t.Cancel != "" || t.Attempt > 1 || t.Requeued != "" || t.LastError != "":
		return nil, fmt.Errorf("workflow %s: %s: a step is a new task: leave Workflow, Input, Cancel, Attempt, Requeued and LastError unset", c.w, where(path))
	}
	if t.ID == "" {
		t.ID, t.GeneratedID = c.derive(path), true
		if len(t.ID) > onceq.MaxIDLen {
			return nil, fmt.Errorf("workflow %s: %s: its derived ID %q is over %d bytes: give the step an ID, or the workflow a shorter one", c.w, where(path), t.ID, onceq.MaxIDLen)
		}
	}
	if err := t.Validate(c.maxBytes); err != nil {
		return nil, fmt.Errorf("workflow %s: %s: %w", c.w, where(path), err)
	}
	ref := Ref{Queue: t.Queue, ID: t.ID}
	if other, dup := c.ids[ref]; dup {
		return nil, fmt.Errorf("workflow %s: %s and %s are both task %s: give each step its own ID", c.w, where(other), where(path), ref)
	}
	c.ids[ref] = path
	return flow.StepOf(&t), nil
}

// CheckCycles refuses workflows submitted together whose dependencies
// form a cycle: a workflow that waits, through After, for a task of
// another that waits for one of its own would never start, and neither
// would the other. (A cycle with a workflow submitted before cannot be
// seen here: the workflow service finds it when they wait, and ends them
// with the cycle as their reason.)
func CheckCycles(nodes ...Node) error {
	owner := map[Ref]int{} // a task of a workflow given with its ID -> the workflow
	for i := range nodes {
		nodes[i].each(func(x *Node) {
			if x.kind == kindTask && x.task.ID != "" {
				owner[Ref{Queue: x.task.Queue, ID: x.task.ID}] = i
			}
		})
	}
	const (
		unseen = iota
		open
		done
	)
	mark := make([]int, len(nodes))
	var visit func(i int, path []Ref) error
	visit = func(i int, path []Ref) error {
		mark[i] = open
		for _, d := range nodes[i].after {
			j, ok := owner[d]
			if !ok {
				continue
			}
			switch mark[j] {
			case open:
				return fmt.Errorf("%w: dependency cycle: %s", ErrInvalid, cycleText(append(path, d)))
			case unseen:
				if err := visit(j, append(path, d)); err != nil {
					return err
				}
			}
		}
		mark[i] = done
		return nil
	}
	for i := range nodes {
		if mark[i] == unseen {
			if err := visit(i, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

func cycleText(path []Ref) string {
	parts := make([]string, len(path))
	for i, r := range path {
		parts[i] = r.String()
	}
	return "waits for " + strings.Join(parts, ", which waits for ")
}
