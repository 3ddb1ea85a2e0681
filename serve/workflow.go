package serve

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/auth"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/workflow"
)

// workflowLine reads a bulk element that holds a workflow into its start
// task; ok is false for an ordinary task. Its tasks' queues are the
// namespace's (a task without one is the path's queue); its payloads are
// bounded as a publish's. The bulk makes its queues once it accepted
// every element.
func (s *Server) workflowLine(r *http.Request, raw []byte, now time.Time, task *onceq.Task, node *workflow.Node) (ok bool, err error) {
	ns := r.PathValue("ns")
	line, ok, err := workflow.ParseLine(raw, now, func(q string) (string, error) {
		return s.queueOf(ns, cmp.Or(q, r.PathValue("queue")))
	})
	if !ok || err != nil {
		return ok, err
	}
	*node = line.Node
	if line.ID != "" {
		if err := checkWorkflowID(ns, line.ID); err != nil {
			return true, err
		}
		if err := checkPathID("id", line.ID); err != nil {
			return true, err
		}
	}
	if *task, err = workflow.PrepareScoped(ns, line.ID, line.Node, s.p.MaxMessageBytes()); err != nil {
		return true, err
	}
	for _, p := range workflow.Payloads(line.Node) {
		if p > s.cfg.maxPayload {
			return true, &apiError{status: http.StatusRequestEntityTooLarge, field: "payload",
				msg: fmt.Sprintf("a task's payload of %d bytes: at most %d (the server's --max-payload-bytes)", p, s.cfg.maxPayload)}
		}
	}
	return true, nil
}

// A namespace's workflow ID is kept as <ns>/<id> (workflow.PrepareScoped):
// a namespace name has no '/', so no namespace can take, read or cancel
// another's workflow, nor the joins and step IDs derived from its ID.

// scopedID is the ID namespace ns's workflow id is kept as.
func scopedID(ns, id string) string { return ns + "/" + id }

// checkWorkflowID refuses a workflow ID that does not fit once scoped.
func checkWorkflowID(ns, id string) error {
	if err := workflow.ValidateID(id); err != nil {
		return badRequest("id", "%v", err)
	}
	if n := workflow.MaxIDLen - len(ns) - 1; len(id) > n {
		return badRequest("id", "workflow ID %q: %d bytes, at most %d in namespace %s (kept as <namespace>/<id>, within %d)",
			id, len(id), n, ns, workflow.MaxIDLen)
	}
	return nil
}

// findWorkflow reads the status of workflow id as namespace ns sees it
// (ns "*": an operator, who sees any workflow by its stored ID). A
// namespace sees its own workflows, <ns>/<id>; and a workflow submitted
// outside the API under an ID of no namespace (workflow.Submit) once its
// shape is known and every task of it is in the namespace's queues. What
// a namespace does not see is not found: a message never names another
// namespace's workflow or queues. full is the ID the workflow is kept as.
func (s *Server) findWorkflow(ctx context.Context, ns, id string) (st workflow.Status, full string, err error) {
	if ns == auth.AllNamespaces {
		st, err = workflow.Get(ctx, s.in, id)
		return st, id, err
	}
	candidates := []string{scopedID(ns, id)}
	if s.cfg.lane != "" && strings.HasPrefix(id, ns+".") {
		// A default ID <queue>/<task ID>, as shownID shows it.
		candidates = append(candidates, scopedID(ns, s.cfg.lane+string(onceq.LaneSep)+id))
	}
	if strings.HasPrefix(id, ns+"/") {
		candidates = []string{id} // a stored ID, as the console links it
	} else if !isNamespaced(id) {
		candidates = append(candidates, id)
	}
	for i, c := range candidates {
		st, err = workflow.Get(ctx, s.in, c)
		switch {
		case errors.Is(err, inspect.ErrNotFound):
			continue
		case err != nil:
			return st, c, err
		case strings.HasPrefix(c, ns+"/"):
			if st.Root != nil && outside(st.Root, s.inNamespace(ns)) {
				break // submitted outside the API with tasks of others
			}
			return st, c, nil
		case i > 0 && st.Root != nil && !outside(st.Root, s.inNamespace(ns)):
			return st, c, nil
		}
	}
	return workflow.Status{}, "", fmt.Errorf("workflow %s of namespace %s: %w", id, ns, inspect.ErrNotFound)
}

// isNamespaced reports whether a stored workflow ID begins with a
// namespace: such an ID is that namespace's alone.
func isNamespaced(id string) bool {
	ns, _, ok := strings.Cut(id, "/")
	return ok && auth.ValidateNamespace(ns) == nil
}

// workflowOf reads a workflow route's path and the workflow's status as
// the path's namespace sees it, waiting up to wait for it to end; full is
// the ID it is kept as.
func (s *Server) workflowOf(ctx context.Context, r *http.Request, wait time.Duration) (st workflow.Status, full string, err error) {
	ns := r.PathValue("ns")
	if _, err := s.queueOf(ns, r.PathValue("queue")); err != nil {
		return st, "", err
	}
	id := r.PathValue("id")
	if err := checkWorkflowID(ns, id); err != nil {
		return st, "", err
	}
	st, full, err = s.findWorkflow(ctx, ns, id)
	if err == nil && wait > 0 && !st.State.Final() {
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		st, err = workflow.Wait(wctx, s.in, full)
		if err != nil && wctx.Err() != nil && ctx.Err() == nil {
			st, err = workflow.Get(ctx, s.in, full) // what is known at the timeout
		}
	}
	if errors.Is(err, inspect.ErrNotFound) {
		return st, "", &apiError{status: http.StatusNotFound, field: "id", msg: fmt.Sprintf(
			"workflow %s not found in namespace %s: it was never submitted, or it finished longer ago than the task records are kept", id, ns)}
	}
	if err != nil {
		return st, "", err
	}
	if st.Root == nil {
		// Without its shape (not yet seen by the service, or it did not
		// start) the queues of its steps are unknown: its reason, which
		// may name queues outside the namespace, is not shown.
		st.Reason = ""
	}
	return st, full, nil
}

// inNamespace says which queues are namespace ns's: its topics
// <ns>.<queue>, or on a lane its lane queues <lane>/<ns>.<queue>.
func (s *Server) inNamespace(ns string) func(queue string) bool {
	return func(queue string) bool {
		if s.cfg.lane != "" {
			label, ok := strings.CutPrefix(queue, s.cfg.lane+string(onceq.LaneSep))
			return ok && strings.HasPrefix(label, ns+".")
		}
		return strings.HasPrefix(queue, ns+".")
	}
}

// shownID is the ID namespace ns gave (or was given) for the workflow kept
// as id: without "<ns>/" and, on a lane, without the lane of a default ID
// <lane>/<ns>.<queue>/<task ID>.
func (s *Server) shownID(ns, id string) string {
	id = strings.TrimPrefix(id, ns+"/")
	if s.cfg.lane != "" {
		if rest, ok := strings.CutPrefix(id, s.cfg.lane+string(onceq.LaneSep)); ok && strings.HasPrefix(rest, ns+".") {
			id = rest
		}
	}
	return id
}

// shown is a status as the API shows it to namespace ns: the workflow's
// ID as the namespace gave it.
func (s *Server) shown(ns string, st workflow.Status) json.RawMessage {
	if strings.HasPrefix(st.ID, ns+"/") {
		id := s.shownID(ns, st.ID)
		st.ID = id
		if st.Start != nil {
			start := *st.Start
			start.ID = id
			st.Start = &start
		}
	}
	return mustJSON(st)
}

// knownWorkflow is a bulk element's answer for the workflow kept as id,
// which was known, so that nothing was written: its ID as the namespace
// gave it, its workflow_state, and in msg the way on for one that
// failed (over HTTP, the retry endpoint for one that did not start). It
// has no task state: its start task's ("succeeded" for a workflow that
// started, whatever became of its steps) is not the workflow's.
func (s *Server) knownWorkflow(r *http.Request, id string) (published, error) {
	st, err := workflow.Get(r.Context(), s.in, id)
	if err != nil {
		return published{}, lookupError(err)
	}
	shown := s.shownID(r.PathValue("ns"), id)
	msg := workflow.Submission{ID: shown, Status: st}.Known()
	if st.Retryable() {
		msg = "known, in state " + string(st.State)
		if st.Reason != "" {
			msg += ": " + st.Reason
		}
		msg += "; it did not start: once its cause is fixed, retry it with POST /api/" + r.PathValue("ns") + "/" +
			r.PathValue("queue") + "/workflow/" + url.PathEscape(shown) + "/retry"
	}
	return published{Msg: msg, JobID: shown, Workflow: true, WorkflowState: st.State}, nil
}

// outside reports whether a task of s is of a queue in does not hold.
func outside(s *workflow.Step, in func(queue string) bool) bool {
	if s.Kind == "task" && !in(s.Queue) {
		return true
	}
	for _, ss := range [][]workflow.Step{s.Steps, s.OnSuccess, s.OnError} {
		for i := range ss {
			if outside(&ss[i], in) {
				return true
			}
		}
	}
	return s.Callback != nil && outside(s.Callback, in)
}

// workflowStatus: GET /api/{ns}/{queue}/workflow/{id}: the workflow's
// state, where it stopped and why, its output and every step.
func (s *Server) workflowStatus(w http.ResponseWriter, r *http.Request) {
	st, _, err := s.workflowOf(r.Context(), r, 0)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.shown(r.PathValue("ns"), st))
}

// workflowWait: GET /api/{ns}/{queue}/workflow/{id}/wait?timeout=: the
// workflow's status once it succeeded or failed, or at the timeout.
func (s *Server) workflowWait(w http.ResponseWriter, r *http.Request) {
	timeout, err := durationParam(r.URL.Query(), "timeout", DefaultWaitTimeout, time.Millisecond, s.cfg.maxWait)
	if err != nil {
		writeError(w, err)
		return
	}
	st, _, err := s.workflowOf(r.Context(), r, timeout)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.shown(r.PathValue("ns"), st))
}

// workflowCancel: DELETE /api/{ns}/{queue}/workflow/{id}: cancels the
// workflow (workflow.Cancel: no step of it starts from then on) and
// answers its status as of before the cancel: 202 when the cancel was
// written, 200 when the workflow was already done and nothing changed.
func (s *Server) workflowCancel(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	st, full, err := s.workflowOf(r.Context(), r, 0)
	switch {
	case err != nil:
		writeError(w, err)
		return
	case st.State.Final():
		writeJSON(w, http.StatusOK, s.shown(ns, st))
		return
	case st.Root == nil && !strings.HasPrefix(full, ns+"/"):
		// Its steps, and so their namespaces, are not known yet.
		writeError(w, &apiError{status: http.StatusConflict, field: "id", msg: fmt.Sprintf(
			"workflow %s is pending: the workflow service has not read it yet, so the queues of its steps are not known: retry in a moment", r.PathValue("id"))})
		return
	}
	if st, err = workflow.Cancel(r.Context(), s.ctl, full); err != nil {
		writeError(w, err)
		return
	}
	code := http.StatusAccepted
	if st.State.Final() { // done meanwhile
		code = http.StatusOK
	}
	writeJSON(w, code, s.shown(ns, st))
}

func mustJSON(st workflow.Status) []byte {
	b, err := json.Marshal(st)
	if err != nil {
		panic(err) // a Status always marshals
	}
	return b
}

// workflowRetry: POST /api/{ns}/{queue}/workflow/{id}/retry: runs again a
// workflow that failed before it started, once its cause is fixed
// (workflow.Retry): 202 with its status as of before; 409 with the way on
// for one that cannot be retried (it started and failed at a step: submit
// it under a new ID; or it did not fail); 403 for one with a task outside
// the namespace.
func (s *Server) workflowRetry(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	st, full, err := s.workflowOf(r.Context(), r, 0)
	if err != nil {
		writeError(w, err)
		return
	}
	_, err = workflow.Retry(r.Context(), s.in, s.p, s.cfg.conn, full, s.retryIn(ns, st.ID))
	switch {
	case errors.Is(err, workflow.ErrNotRetryable):
		writeError(w, &apiError{status: http.StatusConflict, field: "id", msg: err.Error()})
		return
	case err != nil:
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, s.shown(ns, st))
}

// retryIn lets workflow.Retry run workflow id again only if namespace ns
// holds every task of it: the status of a workflow that did not start
// does not name its queues, its dead start task does. Namespace "*" holds
// every queue.
func (s *Server) retryIn(ns, id string) workflow.RetryOpt {
	in := s.inNamespace(ns)
	return workflow.RetryIf(func(queues []string) error {
		for _, q := range queues {
			if ns != auth.AllNamespaces && !in(q) {
				return &apiError{status: http.StatusForbidden, field: "id", msg: fmt.Sprintf("workflow %s has a task in queue %s, outside namespace %s", id, q, ns)}
			}
		}
		return nil
	})
}
