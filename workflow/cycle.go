package workflow

import (
	"context"
	"errors"
	"strings"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/internal/flow"
)

// maxCycleDepth bounds the workflows a cycle check follows.
const maxCycleDepth = 64

// dependencyCycle looks, for workflow def that waits for its dependencies,
// for a cycle through workflows submitted apart (CheckCycles sees those
// submitted together): def waits for a task of a workflow that waits, in
// its turn or further on, for a task of def. None of them would ever
// start. It returns the cycle as text ("" for none), from the records of
// the waiting workflows, which keep their shapes and dependencies: the
// workflow of a task is found as "<queue>/<id>" (a task submitted with
// dependencies) or, for a derived step ID "<workflow>/<path>", by its
// prefixes. Each workflow of a cycle finds it when it checks its
// dependencies again, and ends with it as its reason.
func dependencyCycle(ctx context.Context, in *inspect.Inspector, def *flow.Definition) (string, error) {
	own := map[flow.Ref]bool{}
	tasksOf(&def.Root, own)
	seen := map[string]bool{def.W: true}
	var walk func(after []flow.Ref, path []string, depth int) (string, error)
	walk = func(after []flow.Ref, path []string, depth int) (string, error) {
		if depth > maxCycleDepth {
			return "", nil
		}
		for _, d := range after {
			at := append(path, d.String())
			if own[d] {
				return "workflow " + def.W + " waits for " + strings.Join(at, ", which waits for ") + ", a task of " + def.W, nil
			}
			other, err := waitingOwner(ctx, in, d)
			if err != nil || other == nil || seen[other.W] {
				if err != nil {
					return "", err
				}
				continue
			}
			seen[other.W] = true
			if c, err := walk(other.After, at[:len(at):len(at)], depth+1); c != "" || err != nil {
				return c, err
			}
		}
		return "", nil
	}
	return walk(def.After, nil, 0)
}

// waitingOwner returns the shape of the waiting workflow task d belongs
// to, or nil if there is none (it started, or d is no workflow's task).
func waitingOwner(ctx context.Context, in *inspect.Inspector, d flow.Ref) (*flow.Definition, error) {
	for _, w := range append([]string{d.Queue + "/" + d.ID}, derivedOwners(d.ID)...) {
		if ValidateID(w) != nil {
			continue
		}
		rec, err := in.Get(ctx, onceq.WorkflowQueue, w)
		switch {
		case errors.Is(err, inspect.ErrNotFound), errors.Is(err, inspect.ErrNoQueue):
			continue
		case err != nil:
			return nil, err
		case rec.State != onceq.StateScheduled && rec.State != onceq.StateRetrying || rec.Result == nil:
			continue // not waiting
		}
		shape, err := parseShape(rec.Result)
		if err != nil {
			continue
		}
		if w != d.Queue+"/"+d.ID && !derivedIn(&shape.Root, w, d) {
			continue
		}
		return &shape, nil
	}
	return nil, nil
}

// derivedIn reports whether task d is a step of workflow w, whose shape
// root is: a derived step ID is "<w>/<path>", and its step has no ID in
// the shape; a client's ID is there as it is.
func derivedIn(root *flow.Node, w string, d flow.Ref) bool {
	tasks := map[flow.Ref]bool{}
	tasksOf(root, tasks)
	return tasks[d] || strings.HasPrefix(d.ID, w+"/")
}

// tasksOf adds the tasks of n that have an ID to out.
func tasksOf(n *flow.Node, out map[flow.Ref]bool) {
	if n.Task != nil && n.Task.ID != "" {
		out[flow.Ref{Queue: n.Task.Queue, ID: n.Task.ID}] = true
	}
	for _, ns := range [][]flow.Node{n.Chain, n.Group, n.OnSuccess, n.OnError} {
		for i := range ns {
			tasksOf(&ns[i], out)
		}
	}
	if n.Callback != nil {
		tasksOf(n.Callback, out)
	}
}

// neverRuns tells why task d, which has no record, never will have one:
// it is a step, by its derived ID "<workflow>/<path>", of a workflow
// that started and skips it (the rest of a failed chain, a callback not
// taken). It returns "" while d may still run.
func neverRuns(ctx context.Context, in *inspect.Inspector, d flow.Ref) (string, error) {
	for _, w := range derivedOwners(d.ID) {
		if ValidateID(w) != nil {
			continue
		}
		st, err := Get(ctx, in, w)
		switch {
		case errors.Is(err, inspect.ErrNotFound):
			continue
		case err != nil:
			return "", err
		}
		if s := findStep(st.Root, d); s != nil && s.State == StateSkipped {
			return "workflow " + w + " skips it (" + s.Reason + ")", nil
		}
	}
	return "", nil
}

// derivedOwners returns the workflows a derived step ID "<w>/<path>" may
// be a step of: its prefixes before each '/', longest first.
func derivedOwners(id string) []string {
	var out []string
	for i := strings.LastIndexByte(id, '/'); i > 0; i = strings.LastIndexByte(id[:i], '/') {
		out = append(out, id[:i])
	}
	return out
}

// findStep returns the task step of s that is d, or nil.
func findStep(s *Step, d flow.Ref) *Step {
	if s == nil {
		return nil
	}
	if s.Queue == d.Queue && s.ID == d.ID {
		return s
	}
	for _, ns := range [][]Step{s.Steps, s.OnSuccess, s.OnError} {
		for i := range ns {
			if f := findStep(&ns[i], d); f != nil {
				return f
			}
		}
	}
	return findStep(s.Callback, d)
}
