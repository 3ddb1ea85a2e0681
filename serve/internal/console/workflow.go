package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/auth"
	"github.com/onceq/onceq/control"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/workflow"
)

// The console's workflow page: a workflow's state, what it waits for or
// which step failed it and why, its output, and its steps as a tree, each
// task linked to its task page. A workflow may have 100,000 tasks, so the
// tree lists a bounded number of each chain's steps and group's members
// (the failed and running ones first) and counts the others by state.

const (
	// maxListed bounds the steps listed of one chain, group or chord.
	maxListed = 20
	// maxRows bounds the lines of a workflow's tree, for groups of
	// groups.
	maxRows = 500
)

// stepRow is a line of a workflow's tree: a step, or (Step nil) a note of
// the steps of the step above it that are not listed.
type stepRow struct {
	// Depth is how deep the step sits: 0 for the root.
	Depth int
	// Label is where the step sits in its parent: its index, "callback",
	// "on success" or "on error"; "" for the root.
	Label string
	Step  *workflow.Step
	// Link is whether the task has a page that the token opens.
	Link bool
	// Summary counts a chain's, group's or chord's steps by state.
	Summary string
	// Note says how many steps of the step above are not listed.
	Note string
}

// Indent is the row's indent class: the stylesheet indents 8 levels.
func (r stepRow) Indent() int { return min(r.Depth, 8) }

// stepTree flattens a workflow's steps into the rows of its tree.
type stepTree struct {
	rows []stepRow
	// sees reports whether the token opens a queue.
	sees func(queue string) bool
	// cut counts the steps left out, with what they hold, past maxRows.
	cut int
}

func (t *stepTree) add(s *workflow.Step, label string, depth int) {
	if len(t.rows) >= maxRows {
		t.cut++
		return
	}
	row := stepRow{Depth: depth, Label: label, Step: s}
	if s.Kind == "task" {
		row.Link = s.Record != nil && t.sees(s.Queue)
	} else {
		row.Summary = summary(s)
	}
	t.rows = append(t.rows, row)
	listed := pick(s.Steps)
	for _, i := range listed {
		t.add(&s.Steps[i], strconv.Itoa(i), depth+1)
	}
	if n := len(s.Steps) - len(listed); n > 0 && len(t.rows) < maxRows {
		t.rows = append(t.rows, stepRow{Depth: depth + 1, Note: fmt.Sprintf(
			"%d more %s not listed: the failed and running ones come first (onceq workflow get lists every one)", n, noun(s))})
	}
	if s.Callback != nil {
		t.add(s.Callback, "callback", depth+1)
	}
	for i := range s.OnSuccess {
		t.add(&s.OnSuccess[i], "on success", depth+1)
	}
	for i := range s.OnError {
		t.add(&s.OnError[i], "on error", depth+1)
	}
}

// noun names what a chain or group holds.
func noun(s *workflow.Step) string {
	if s.Kind == "chain" {
		return "steps"
	}
	return "members"
}

// pick returns the indexes of the steps to list: all of them up to
// maxListed, else the failed ones first, then the running ones, then the
// others, each in their order.
func pick(steps []workflow.Step) []int {
	out := make([]int, 0, min(len(steps), maxListed))
	if len(steps) <= maxListed {
		for i := range steps {
			out = append(out, i)
		}
		return out
	}
	rank := func(s workflow.State) int {
		switch s {
		case workflow.StateFailed:
			return 0
		case workflow.StateRunning:
			return 1
		}
		return 2
	}
	for r := 0; r < 3 && len(out) < maxListed; r++ {
		for i := range steps {
			if rank(steps[i].State) == r {
				if out = append(out, i); len(out) == maxListed {
					break
				}
			}
		}
	}
	return out
}

// summary counts a step's steps by state: "40 members: 38 succeeded, 2
// failed".
func summary(s *workflow.Step) string {
	n := map[workflow.State]int{}
	for i := range s.Steps {
		n[s.Steps[i].State]++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", len(s.Steps), noun(s))
	sep := ": "
	for _, st := range []workflow.State{workflow.StateFailed, workflow.StateCanceling, workflow.StateRunning, workflow.StateWaiting, workflow.StatePending, workflow.StateSkipped, workflow.StateSucceeded} {
		if n[st] > 0 {
			fmt.Fprintf(&b, "%s%d %s", sep, n[st], st)
			sep = ", "
		}
	}
	return b.String()
}

// workflowView is what the workflow page shows.
type workflowView struct {
	// ID is the workflow asked for, "" on the search page.
	ID     string
	Status *workflow.Status
	Rows   []stepRow
	// Cut counts the steps left out of a tree past maxRows.
	Cut int
	// Cancelable: the workflow is not done, and may be canceled.
	Cancelable bool
	// Retryable: the workflow failed before it started, and may be run
	// again (workflow.Retry).
	Retryable bool
	// On the search page: the latest workflows the token sees, of State
	// when it names one, and the states to filter by.
	List   []workflowRow
	State  string
	States []workflow.State
}

// workflowRow is a workflow of the list: its ID as kept, its state and
// when it was submitted.
type workflowRow struct {
	ID        string
	State     workflow.State
	Submitted time.Time
	Reason    string
}

// Bounds of the workflow list: the rows a page shows, and the workflows
// it reads to find them (each costs a read of its steps' records).
const (
	workflowListRows = 50
	workflowListRead = 500
)

// workflowList lists the latest workflows tok sees, newest first, of
// state when it is not empty: to an operator's token every one; to a
// namespace's, those kept in it, or submitted outside the API without
// one, whose steps are all in it (as findWorkflow finds them); found
// among the workflowListRead latest.
func (c *Console) workflowList(ctx context.Context, tok auth.Token, state workflow.State) ([]workflowRow, error) {
	var rows []workflowRow
	read, after := 0, ""
	for len(rows) < workflowListRows && read < workflowListRead {
		pg, err := c.in.List(ctx, onceq.WorkflowQueue, inspect.Filter{Limit: 100, After: after})
		if errors.Is(err, inspect.ErrNoQueue) {
			return nil, nil // no workflow yet
		}
		if err != nil {
			return nil, err
		}
		for _, r := range pg.Tasks {
			if read++; len(rows) == workflowListRows || read > workflowListRead {
				break
			}
			if workflow.ValidateID(r.ID) != nil {
				continue // a join's report, not a workflow
			}
			ns := tok.Namespace
			if !c.api.WorkflowIn(ns, r.ID, nil) {
				continue // another namespace's
			}
			st, err := workflow.Get(ctx, c.in, r.ID)
			if errors.Is(err, inspect.ErrNotFound) {
				continue // forgotten meanwhile
			}
			if err != nil {
				return nil, err
			}
			// As findWorkflow sees them: one submitted outside the API
			// is the namespace's when every step of it is.
			if !c.api.WorkflowIn(ns, r.ID, &st) {
				continue
			}
			if state != "" && st.State != state {
				continue
			}
			rows = append(rows, workflowRow{ID: r.ID, State: st.State, Submitted: r.Enqueued, Reason: st.Reason})
		}
		if after = pg.Next; after == "" {
			break
		}
	}
	return rows, nil
}

// workflowPage: GET /console/workflow?id=ID: the workflow's page; without
// an ID, its search box.
func (c *Console) workflowPage(w http.ResponseWriter, r *http.Request, pg *page) {
	pg.Title = "Workflows"
	v := workflowView{ID: strings.TrimSpace(r.URL.Query().Get("id"))}
	pg.Data = &v
	if v.ID == "" {
		v.States = []workflow.State{workflow.StatePending, workflow.StateWaiting, workflow.StateRunning, workflow.StateCanceling,
			workflow.StateSucceeded, workflow.StateFailed}
		v.State = r.URL.Query().Get("state")
		if v.State != "" && !slices.Contains(v.States, workflow.State(v.State)) {
			w.WriteHeader(http.StatusBadRequest)
			pg.Error = fmt.Sprintf("state %q: want one of %v, or none", v.State, v.States)
			v.State = ""
		}
		var err error
		if v.List, err = c.workflowList(r.Context(), pg.Token, workflow.State(v.State)); err != nil {
			pg.Error = err.Error()
		}
		c.render(w, "workflow", pg)
		return
	}
	st, _, code, err := c.consoleWorkflow(r.Context(), pg.Token, v.ID)
	if err != nil {
		w.WriteHeader(code)
		pg.Error = err.Error()
		c.render(w, "workflow", pg)
		return
	}
	pg.Title = "Workflow " + v.ID
	v.Status, v.Cancelable, v.Retryable = &st, !st.State.Final(), st.Retryable()
	if st.Root != nil {
		t := stepTree{sees: func(q string) bool { return c.consoleSees(pg.Token, q) }}
		t.add(st.Root, "", 0)
		v.Rows, v.Cut = t.rows, t.cut
	}
	c.render(w, "workflow", pg)
}

// consoleWorkflow reads workflow id's status for tok, and on an error the
// status code to answer. A token of every namespace sees any workflow by
// the ID it is kept as; a namespace's token sees what the API shows it
// (findWorkflow), by the ID it gave or the one kept: what it does not
// see is not found. full is the ID the workflow is kept as.
func (c *Console) consoleWorkflow(ctx context.Context, tok auth.Token, id string) (st workflow.Status, full string, code int, err error) {
	if err := workflow.ValidateID(id); err != nil {
		return st, "", http.StatusBadRequest, err
	}
	st, full, err = c.api.FindWorkflow(ctx, tok.Namespace, id)
	switch {
	case errors.Is(err, inspect.ErrNotFound):
		return st, "", http.StatusNotFound, fmt.Errorf("workflow %s not found: it was never submitted, or it finished longer ago than "+
			"the task records are kept (a step's task page links to its workflow)", id)
	case err != nil:
		return st, "", http.StatusInternalServerError, err
	}
	if tok.Namespace != auth.AllNamespaces && st.Root == nil {
		st.Reason = "" // it may name queues outside the namespace
	}
	return st, full, http.StatusOK, nil
}

// consoleWorkflowCancel: POST /console/workflow/cancel (id): cancels a
// workflow that is not done (workflow.Cancel).
func (c *Console) consoleWorkflowCancel(w http.ResponseWriter, r *http.Request, pg *page) {
	c.consoleWorkflowAction(w, r, pg, func(full, _ string) string { return cancelWorkflow(r.Context(), c.ctl, full) })
}

// consoleWorkflowRetry: POST /console/workflow/retry (id): runs again a
// workflow that failed before it started (workflow.Retry), once its
// cause is fixed; a namespace's token, only one whose every task is in
// its namespace.
func (c *Console) consoleWorkflowRetry(w http.ResponseWriter, r *http.Request, pg *page) {
	c.consoleWorkflowAction(w, r, pg, func(full, id string) string {
		if _, err := workflow.Retry(r.Context(), c.in, c.p, c.conn, full, c.api.RetryIn(pg.Token.Namespace, id)); err != nil {
			return err.Error()
		}
		return "retried: its start task runs again"
	})
}

// consoleWorkflowAction runs act on the workflow the form's id names, as
// the token sees it, and goes back to its page with what act says: 400
// for a bad id, the lookup's error for one the token cannot see.
func (c *Console) consoleWorkflowAction(w http.ResponseWriter, r *http.Request, pg *page, act func(full, id string) string) {
	id := strings.TrimSpace(r.FormValue("id"))
	_, full, code, err := c.consoleWorkflow(r.Context(), pg.Token, id)
	if code == http.StatusBadRequest {
		http.Error(w, err.Error(), code)
		return
	}
	to := "/console/workflow?id=" + url.QueryEscape(id)
	if err != nil {
		back(w, r, to, err.Error())
		return
	}
	back(w, r, to, act(full, id))
}

// cancelWorkflow cancels workflow id and says what came of it.
func cancelWorkflow(ctx context.Context, ctl *control.Controller, id string) string {
	st, err := workflow.Cancel(ctx, ctl, id)
	switch {
	case err != nil:
		return err.Error()
	case st.State.Final():
		return "already " + string(st.State) + ": nothing to cancel"
	case st.Root == nil || st.State == workflow.StateWaiting:
		return "canceled: it will not start"
	}
	return "canceled: no step starts from now on; the steps running finish"
}
