package serve

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/workflow"
)

// workflowLine reads a bulk element that holds a workflow into its start
// task; ok is false for an ordinary task. Its tasks' queues are the
// namespace's (a task without one is the path's queue), made when missing
// unless the server does not create queues; its payloads are bounded as a
// publish's.
func (s *Server) workflowLine(r *http.Request, raw []byte, now time.Time, task *onceq.Task, node *workflow.Node) (ok bool, err error) {
	ns := r.PathValue("ns")
	line, ok, err := workflow.ParseLine(raw, now, func(q string) (string, error) {
		return topicOf(ns, cmp.Or(q, r.PathValue("queue")))
	})
	if !ok || err != nil {
		return ok, err
	}
	*node = line.Node
	if *task, err = workflow.Prepare(line.ID, line.Node, s.p.MaxMessageBytes()); err != nil {
		return true, err
	}
	for _, p := range workflow.Payloads(line.Node) {
		if p > s.cfg.maxPayload {
			return true, &apiError{status: http.StatusRequestEntityTooLarge, field: "payload",
				msg: fmt.Sprintf("a task's payload of %d bytes: at most %d (the server's --max-payload-bytes)", p, s.cfg.maxPayload)}
		}
	}
	for _, q := range workflow.Queues(line.Node) {
		if err := s.ensureQueue(r.Context(), q); err != nil {
			return true, err
		}
	}
	return true, nil
}

// workflowOf reads a workflow route's path and the workflow's status,
// refusing one with a task outside the namespace.
func (s *Server) workflowOf(ctx context.Context, r *http.Request, wait time.Duration) (workflow.Status, error) {
	ns := r.PathValue("ns")
	if _, err := topicOf(ns, r.PathValue("queue")); err != nil {
		return workflow.Status{}, err
	}
	id := r.PathValue("id")
	if err := workflow.ValidateID(id); err != nil {
		return workflow.Status{}, badRequest("id", "%v", err)
	}
	var st workflow.Status
	var err error
	if wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		st, err = workflow.Wait(wctx, s.in, id)
		if err != nil && wctx.Err() != nil && ctx.Err() == nil {
			st, err = workflow.Get(ctx, s.in, id) // what is known at the timeout
		}
	} else {
		st, err = workflow.Get(ctx, s.in, id)
	}
	if errors.Is(err, inspect.ErrNotFound) {
		return st, &apiError{status: http.StatusNotFound, field: "id", msg: "workflow not found: " + err.Error()}
	}
	if err != nil {
		return st, err
	}
	if st.Root == nil {
		// Without its shape (not yet seen by the service, or it did not
		// start) the namespaces of its steps are unknown: its reason,
		// which may name another namespace's queues, is not shown.
		st.Reason = ""
	} else {
		if q := outside(st.Root, ns+"."); q != "" {
			// Workflow IDs are global: a token of one namespace does not
			// read another's workflows.
			return workflow.Status{}, &apiError{status: http.StatusForbidden, field: "id",
				msg: fmt.Sprintf("workflow %s has a task in queue %s, outside namespace %s", id, q, ns)}
		}
	}
	return st, nil
}

// outside returns the topic of a task of s outside the namespace prefix,
// or "".
func outside(s *workflow.Step, prefix string) string {
	if s.Kind == "task" && !strings.HasPrefix(s.Queue, prefix) {
		return s.Queue
	}
	for _, ss := range [][]workflow.Step{s.Steps, s.OnSuccess, s.OnError} {
		for i := range ss {
			if q := outside(&ss[i], prefix); q != "" {
				return q
			}
		}
	}
	if s.Callback != nil {
		return outside(s.Callback, prefix)
	}
	return ""
}

// workflowStatus: GET /api/{ns}/{queue}/workflow/{id}: the workflow's
// state, where it stopped and why, its output and every step.
func (s *Server) workflowStatus(w http.ResponseWriter, r *http.Request) {
	st, err := s.workflowOf(r.Context(), r, 0)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, json.RawMessage(mustJSON(st)))
}

// workflowWait: GET /api/{ns}/{queue}/workflow/{id}/wait?timeout=: the
// workflow's status once it succeeded or failed, or at the timeout.
func (s *Server) workflowWait(w http.ResponseWriter, r *http.Request) {
	timeout, err := durationParam(r.URL.Query(), "timeout", DefaultWaitTimeout, time.Millisecond, s.cfg.maxWait)
	if err != nil {
		writeError(w, err)
		return
	}
	st, err := s.workflowOf(r.Context(), r, timeout)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, json.RawMessage(mustJSON(st)))
}

// workflowCancel: DELETE /api/{ns}/{queue}/workflow/{id}: cancels the
// workflow (workflow.Cancel: no step of it starts from then on) and
// answers its status as of before the cancel: 202 when the cancel was
// written, 200 when the workflow was already done and nothing changed.
func (s *Server) workflowCancel(w http.ResponseWriter, r *http.Request) {
	st, err := s.workflowOf(r.Context(), r, 0)
	switch {
	case err != nil:
		writeError(w, err)
		return
	case st.State.Final():
		writeJSON(w, http.StatusOK, json.RawMessage(mustJSON(st)))
		return
	case st.Root == nil:
		// Its steps, and so their namespaces, are not known yet.
		writeError(w, &apiError{status: http.StatusConflict, field: "id", msg: fmt.Sprintf(
			"workflow %s is pending: the workflow service has not read it yet, so the queues of its steps are not known: retry in a moment", st.ID)})
		return
	}
	if st, err = workflow.Cancel(r.Context(), s.in, st.ID); err != nil {
		writeError(w, err)
		return
	}
	code := http.StatusAccepted
	if st.State.Final() { // done meanwhile
		code = http.StatusOK
	}
	writeJSON(w, code, json.RawMessage(mustJSON(st)))
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
	st, err := s.workflowOf(r.Context(), r, 0)
	if err != nil {
		writeError(w, err)
		return
	}
	inNamespace := func(queues []string) error {
		for _, q := range queues {
			if !strings.HasPrefix(q, ns+".") {
				return &apiError{status: http.StatusForbidden, field: "id", msg: fmt.Sprintf("workflow %s has a task in queue %s, outside namespace %s", st.ID, q, ns)}
			}
		}
		return nil
	}
	_, err = workflow.Retry(r.Context(), s.in, s.p, s.cfg.conn, st.ID, workflow.RetryIf(inNamespace))
	switch {
	case errors.Is(err, workflow.ErrNotRetryable):
		writeError(w, &apiError{status: http.StatusConflict, field: "id", msg: err.Error()})
		return
	case err != nil:
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, json.RawMessage(mustJSON(st)))
}
