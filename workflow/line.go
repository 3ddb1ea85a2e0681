package workflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/onceq/onceq"
)

// The fields a workflow line adds to a line of tasks (onceq.ParseLine).
var lineFields = []string{"chain", "group", "chord", "callback", "depends_on", "on_success", "on_error"}

// LineFields names them, for messages.
const LineFields = `"chain", "group", "chord" (with "group" and "callback"), "depends_on", "on_success" and "on_error"`

// Line is a workflow as a JSON line of tasks holds it.
type Line struct {
	// ID is the workflow's ID: the line's "id" on a chain, group or chord
	// line, "" (Submit chooses) on a task line.
	ID   string
	Node Node
}

// QueueOf maps the queue a task of a line names ("" when it names none)
// to the queue it goes to, or refuses it: the CLI gives lines without a
// queue its --queue, the HTTP API maps a namespace's queue to its topic.
type QueueOf func(queue string) (string, error)

// ParseLine reads a workflow from a JSON line of tasks. A line that is
// not one JSON object of known fields is refused (err, whatever ok); ok
// is false for a line without a workflow field: an ordinary task line,
// for onceq.ParseLine (which says what else may be wrong with it). A
// workflow line is one of
//
//	{"id": ID, "chain": [N, ...]}
//	{"id": ID, "group": [N, ...]}
//	{"id": ID, "chord": {"group": [N, ...], "callback": N}}
//	T with "depends_on": ["id", {"queue": Q, "id": ID}, ...]
//
// where each N is a task line T (its own queue, id, payload, ...) or a
// nested chain, group or chord, and any node may add "on_success" and
// "on_error": lists of N started when it succeeds or fails. A string in
// depends_on names a task of the line's own queue; only the line's root
// has dependencies. Task times (delay, at, ttl) count from now. Errors
// name the field by its path, such as chain[1].group[0].queue, and wrap
// ErrInvalid.
func ParseLine(line []byte, now time.Time, queueOf QueueOf) (l Line, ok bool, err error) {
	if !mayHoldWorkflow(line) {
		return Line{}, false, nil // most lines: not read twice
	}
	fields, err := onceq.LineObject(line, lineFields...)
	if err != nil {
		return Line{}, false, err
	}
	workflow := false
	for _, f := range lineFields {
		_, has := fields[f]
		workflow = workflow || has
	}
	if !workflow {
		return Line{}, false, nil
	}
	p := lineParser{now: now, queueOf: queueOf}
	if kindOf(fields) != "" {
		if raw, has := fields["id"]; has {
			if err := json.Unmarshal(raw, &l.ID); err != nil || l.ID == "" {
				return Line{}, true, lineErr("id", `the workflow's ID, a non-empty string`)
			}
			if err := ValidateID(l.ID); err != nil {
				return Line{}, true, lineErr("id", "%v", err)
			}
			delete(fields, "id")
		}
	}
	l.Node, err = p.node(fields, "")
	return l, true, err
}

// mayHoldWorkflow reports whether the line names a workflow field at all,
// as a quoted string. (A key spelled with escapes is not seen here, and
// onceq.ParseLine refuses it as an unknown field.)
func mayHoldWorkflow(line []byte) bool {
	for _, f := range quotedLineFields {
		if bytes.Contains(line, f) {
			return true
		}
	}
	return false
}

var quotedLineFields = func() [][]byte {
	out := make([][]byte, len(lineFields))
	for i, f := range lineFields {
		out[i] = []byte(`"` + f + `"`)
	}
	return out
}()

type lineParser struct {
	now     time.Time
	queueOf QueueOf
}

// kindOf is the node kind a line's fields make, "" for a task.
func kindOf(fields map[string]json.RawMessage) string {
	for _, k := range []string{"chain", "group", "chord"} {
		if _, ok := fields[k]; ok {
			return k
		}
	}
	return ""
}

func at(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func lineErr(path, format string, args ...any) error {
	if path == "" {
		return fmt.Errorf("%w line: "+format, append([]any{ErrInvalid}, args...)...)
	}
	return fmt.Errorf("%w line: %s: "+format, append([]any{ErrInvalid, path}, args...)...)
}

// node reads a node from its fields.
func (p *lineParser) node(fields map[string]json.RawMessage, path string) (Node, error) {
	var n Node
	var err error
	kind := kindOf(fields)
	for k := range fields {
		other := k != kind && !slices.Contains([]string{"depends_on", "on_success", "on_error"}, k)
		if kind != "" && other {
			return n, lineErr(path, "%q: a %s line holds %q, \"on_success\" and \"on_error\" (and \"id\" and \"depends_on\" at its root); the task fields go on its steps", k, kind, kind)
		}
		if kind == "" && k == "callback" {
			return n, lineErr(path, `"callback" belongs in a "chord"`)
		}
	}
	switch kind {
	case "chain", "group":
		var steps []Node
		if steps, err = p.nodes(fields[kind], at(path, kind)); err != nil {
			return n, err
		}
		if len(steps) == 0 {
			return n, lineErr(at(path, kind), "an empty list: give at least one step")
		}
		if kind == "chain" {
			n = Chain(steps...)
		} else {
			n = Group(steps...)
		}
	case "chord":
		if n, err = p.chord(fields["chord"], at(path, "chord")); err != nil {
			return n, err
		}
	default:
		rest := map[string]json.RawMessage{}
		for k, v := range fields {
			if !slices.Contains(lineFields, k) {
				rest[k] = v
			}
		}
		if n, err = p.task(rest, path); err != nil {
			return n, err
		}
	}
	for _, cb := range []struct {
		field string
		add   func(Node, ...Node) Node
	}{{"on_success", Node.OnSuccess}, {"on_error", Node.OnError}} {
		raw, has := fields[cb.field]
		if !has {
			continue
		}
		cbs, err := p.nodes(raw, at(path, cb.field))
		if err != nil {
			return n, err
		}
		n = cb.add(n, cbs...)
	}
	if raw, has := fields["depends_on"]; has {
		if path != "" {
			return n, lineErr(at(path, "depends_on"), "only the line's root has dependencies")
		}
		deps, err := p.deps(raw, n)
		if err != nil {
			return n, err
		}
		n = n.After(deps...)
	}
	return n, nil
}

// nodes reads a JSON array of nodes.
func (p *lineParser) nodes(raw json.RawMessage, path string) ([]Node, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(raw, &raws); err != nil {
		return nil, lineErr(path, "want a JSON array of tasks (or chains, groups and chords)")
	}
	out := make([]Node, len(raws))
	for i, r := range raws {
		ip := path + "[" + strconv.Itoa(i) + "]"
		fields, err := onceq.LineObject(r, lineFields...)
		if err != nil {
			return nil, lineErr(ip, "%v", err)
		}
		if _, has := fields["id"]; has && kindOf(fields) != "" {
			return nil, lineErr(ip, `"id" names a workflow: give it on the line, not on a nested %s`, kindOf(fields))
		}
		if out[i], err = p.node(fields, ip); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// chord reads {"group": [...], "callback": N}.
func (p *lineParser) chord(raw json.RawMessage, path string) (Node, error) {
	fields, err := onceq.LineObject(raw, "group", "callback")
	if err != nil {
		return Node{}, lineErr(path, "%v", err)
	}
	for k := range fields {
		if k != "group" && k != "callback" {
			return Node{}, lineErr(path, "%q: a chord holds \"group\" and \"callback\"", k)
		}
	}
	if fields["group"] == nil || fields["callback"] == nil {
		return Node{}, lineErr(path, `a chord holds "group" (a list) and "callback" (a task or a node)`)
	}
	members, err := p.nodes(fields["group"], at(path, "group"))
	if err != nil {
		return Node{}, err
	}
	if len(members) == 0 {
		return Node{}, lineErr(at(path, "group"), "an empty list: give at least one member")
	}
	cbFields, err := onceq.LineObject(fields["callback"], lineFields...)
	if err != nil {
		return Node{}, lineErr(at(path, "callback"), "%v", err)
	}
	cb, err := p.node(cbFields, at(path, "callback"))
	if err != nil {
		return Node{}, err
	}
	return Chord(Group(members...), cb), nil
}

// task reads a task line's fields.
func (p *lineParser) task(fields map[string]json.RawMessage, path string) (Node, error) {
	spec, err := onceq.SpecOf(fields)
	if err != nil {
		return Node{}, lineErr(path, "%v", err)
	}
	if spec.Queue, err = p.queueOf(spec.Queue); err != nil {
		return Node{}, lineErr(at(path, "queue"), "%v", err)
	}
	t, err := spec.Task(p.now, func(f string) string { return at(path, f) })
	if err != nil {
		return Node{}, lineErr("", "%w", err)
	}
	return Task(t), nil
}

// deps reads depends_on: IDs of the root task's queue, or {"queue",
// "id"} objects.
func (p *lineParser) deps(raw json.RawMessage, root Node) ([]Ref, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(raw, &raws); err != nil || len(raws) == 0 {
		return nil, lineErr("depends_on", `want a non-empty list of task IDs, or of {"queue": Q, "id": ID}`)
	}
	out := make([]Ref, len(raws))
	for i, r := range raws {
		ip := "depends_on[" + strconv.Itoa(i) + "]"
		var id string
		if json.Unmarshal(r, &id) == nil {
			if root.kind != kindTask {
				return nil, lineErr(ip, `a %s's dependencies name their queue: {"queue": Q, "id": %q}`, kindName(root.kind), id)
			}
			out[i] = Ref{Queue: root.task.Queue, ID: id}
		} else {
			var ref struct{ Queue, ID string }
			dec := json.NewDecoder(bytes.NewReader(r))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&ref); err != nil || ref.ID == "" {
				return nil, lineErr(ip, `want a task ID, or {"queue": Q, "id": ID}`)
			}
			q, err := p.queueOf(ref.Queue)
			if err != nil {
				return nil, lineErr(ip+".queue", "%v", err)
			}
			out[i] = Ref{Queue: q, ID: ref.ID}
		}
		if err := onceq.ValidateID(out[i].ID); err != nil {
			return nil, lineErr(ip, "%v", err)
		}
	}
	return out, nil
}

func kindName(k kind) string {
	switch k {
	case kindChain:
		return "chain"
	case kindGroup:
		return "group"
	case kindChord:
		return "chord"
	}
	return "task"
}
